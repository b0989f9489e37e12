/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Destinations that said no to SDP, remembered for a while.
 *
 * A "both" client tries SDP first.  Against a server without libsdp that
 * attempt is refused (or, where something else holds the SDP port, times
 * out after fallback_timeout_ms), and every connection paid for it again:
 * about 2 ms each on the software transport.  So a refusal or a timeout
 * is remembered per destination (address and port) for fallback_cache_ms;
 * meanwhile connections to it go to TCP at once, with the fallback reason
 * "remembered".  An SDP connection that succeeds forgets the destination.
 *
 * A small fixed table (no allocation after start, bounded memory whatever
 * the number of destinations): open addressing over PC_SLOTS slots, PC_PROBE
 * probes; an insert takes a free or expired slot, or else the oldest one
 * of its probe window.  One mutex (pc_lock) protects it; it is a leaf
 * lock, taken under an ops_sock lock, nothing taken under it.
 */
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"
#include "sock.h"
#include "tunables.h"

#define PC_SLOTS 256
#define PC_PROBE 8

struct pc_key {
	uint8_t family;		/* AF_INET or AF_INET6 */
	uint16_t port;		/* network order */
	uint8_t addr[16];
};

struct pc_slot {
	struct pc_key key;
	uint64_t noted_ns;	/* 0: free */
	uint64_t expires_ns;
	enum ops_fallback why;
};

static pthread_mutex_t pc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pc_slot pc_table[PC_SLOTS];

static bool pc_key_of(const struct sockaddr *a, socklen_t len, struct pc_key *k)
{
	memset(k, 0, sizeof(*k));
	if (a->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)a;

		k->family = AF_INET;
		k->port = in->sin_port;
		memcpy(k->addr, &in->sin_addr, 4);
		return true;
	}
	if (a->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)a;

		k->family = AF_INET6;
		k->port = in6->sin6_port;
		memcpy(k->addr, &in6->sin6_addr, 16);
		return true;
	}
	return false;
}

/* FNV-1a over the key's bytes. */
static unsigned pc_hash(const struct pc_key *k)
{
	const uint8_t *p = (const void *)k;
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < sizeof(*k); i++)
		h = (h ^ p[i]) * 16777619u;
	return h % PC_SLOTS;
}

/* The slot holding k, or NULL; caller holds pc_lock. */
static struct pc_slot *pc_find(const struct pc_key *k)
{
	unsigned h = pc_hash(k);

	for (unsigned i = 0; i < PC_PROBE; i++) {
		struct pc_slot *e = &pc_table[(h + i) % PC_SLOTS];

		if (e->noted_ns && !memcmp(&e->key, k, sizeof(*k)))
			return e;
	}
	return NULL;
}

void ops_peercache_note(const struct sockaddr *dst, socklen_t len, enum ops_fallback why)
{
	long ms = tun_int(TUN_fallback_cache_ms);
	struct pc_key k;

	if (ms <= 0 || !pc_key_of(dst, len, &k))
		return;
	uint64_t now = ops_now_ns();
	unsigned h = pc_hash(&k);

	pthread_mutex_lock(&pc_lock);
	struct pc_slot *e = pc_find(&k);

	for (unsigned i = 0; !e && i < PC_PROBE; i++) {
		struct pc_slot *c = &pc_table[(h + i) % PC_SLOTS];

		if (!c->noted_ns || c->expires_ns <= now) {
			e = c;
			break;
		}
	}
	for (unsigned i = 0; !e && i < PC_PROBE; i++) {
		struct pc_slot *c = &pc_table[(h + i) % PC_SLOTS];

		if (!e || c->noted_ns < e->noted_ns)
			e = c;
	}
	e->key = k;
	e->noted_ns = now;
	e->expires_ns = now + (uint64_t)ms * 1000000ull;
	e->why = why;
	pthread_mutex_unlock(&pc_lock);
}

bool ops_peercache_check(const struct sockaddr *dst, socklen_t len, enum ops_fallback *why,
			 uint64_t *age_ms)
{
	struct pc_key k;
	bool hit = false;

	if (tun_int(TUN_fallback_cache_ms) <= 0 || !pc_key_of(dst, len, &k))
		return false;
	uint64_t now = ops_now_ns();

	pthread_mutex_lock(&pc_lock);
	struct pc_slot *e = pc_find(&k);

	if (e && e->expires_ns > now) {
		hit = true;
		*why = e->why;
		*age_ms = (now - e->noted_ns) / 1000000ull;
	} else if (e) {
		e->noted_ns = 0;	/* expired: SDP is tried again */
	}
	pthread_mutex_unlock(&pc_lock);
	return hit;
}

void ops_peercache_forget(const struct sockaddr *dst, socklen_t len)
{
	struct pc_key k;

	if (!pc_key_of(dst, len, &k))
		return;
	pthread_mutex_lock(&pc_lock);
	struct pc_slot *e = pc_find(&k);

	if (e)
		e->noted_ns = 0;
	pthread_mutex_unlock(&pc_lock);
}

/* A parent thread may have held the lock at fork; the entries stay. */
void ops_peercache_atfork_child(void)
{
	pthread_mutex_init(&pc_lock, NULL);
}
