/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The OTI registry: which backends this build has, which of them came up on
 * this host, and which one carries a given connection.
 */
#include "oti.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "log.h"
#include "tunables.h"

#define OTI "oti"

/*
 * Compiled-in backends, highest priority first: oti_select() takes the first
 * that accepts an address pair, so shared memory ("shm", peers on this host
 * only) goes first, then the RDMA backends ("ib", "iwarp"), then the software
 * one.
 */
static const struct oti_ops *const oti_builtin[] = {
	&shm_transport_ops,
	&ib_transport_ops,
	&iwarp_transport_ops,
	&tcpf_transport_ops,
};

#define OTI_NBUILTIN (sizeof(oti_builtin) / sizeof(oti_builtin[0]))

/* A test program's backend in place of the built-in ones
 * (oti_test_backend()); NULL in every real process. */
static const struct oti_ops *oti_test_ops;

/* The backends the registry serves: the built-in ones, or the test's. */
static size_t oti_count(void)
{
	return oti_test_ops ? 1 : OTI_NBUILTIN;
}

static const struct oti_ops *oti_at(size_t i)
{
	return oti_test_ops ? oti_test_ops : oti_builtin[i];
}

/* Protects oti_up and oti_ready; oti_select() reads them under it too,
 * which keeps a concurrent oti_fini() from pulling a backend away midway. */
static pthread_mutex_t oti_lock = PTHREAD_MUTEX_INITIALIZER;
static bool oti_up[OTI_NBUILTIN];
static bool oti_ready;
static int oti_nup;

/* Does the comma-separated list name this backend? */
static bool oti_listed(const char *list, const char *name)
{
	size_t nlen = strlen(name);
	const char *p = list;

	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);

		while (len && (*p == ' ' || *p == '\t')) {
			p++;
			len--;
		}
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (len == nlen && !strncmp(p, name, nlen))
			return true;
		p = end ? end + 1 : NULL;
	}
	return false;
}

static bool oti_enabled(const char *name)
{
	/* A private copy: the tunable's buffer may be rewritten by tun_set(). */
	char list[256];

	strncpy(list, tun_str(TUN_transports), sizeof(list) - 1);
	list[sizeof(list) - 1] = '\0';
	return oti_listed(list, name);
}

/* A table built against another oti.h must not be called into. */
static bool oti_valid(const struct oti_ops *ops)
{
	if (ops->version != OTI_VERSION || ops->size < sizeof(struct oti_ops)) {
		sdp_err(OTI, "backend %s: ops version %u size %zu, expected %u size %zu",
			ops->name ? ops->name : "?", ops->version, ops->size, OTI_VERSION,
			sizeof(struct oti_ops));
		return false;
	}
	if (!ops->name || !ops->init || !ops->fini || !ops->probe || !ops->query_caps ||
	    !ops->listen || !ops->listener_name || !ops->listener_fd || !ops->listener_arm ||
	    !ops->get_connreq || !ops->reject || !ops->listener_close ||
	    !ops->ep_accept_open || !ops->accept || !ops->ep_open || !ops->connect ||
	    !ops->ep_names || !ops->ep_fd || !ops->ep_arm || !ops->ep_wait_events ||
	    !ops->get_event ||
	    !ops->poll_cq || !ops->mr_reg || !ops->mr_dereg || !ops->post_recv ||
	    !ops->post_send || !ops->rdma_read || !ops->rdma_write || !ops->disconnect ||
	    !ops->ep_close) {
		sdp_err(OTI, "backend %s: incomplete ops table", ops->name ? ops->name : "?");
		return false;
	}
	return true;
}

int oti_init(void)
{
	int n;

	pthread_mutex_lock(&oti_lock);
	if (oti_ready) {
		n = oti_nup;
		pthread_mutex_unlock(&oti_lock);
		return n;
	}
	oti_nup = 0;
	for (size_t i = 0; i < oti_count(); i++) {
		const struct oti_ops *ops = oti_at(i);

		oti_up[i] = false;
		if (!oti_valid(ops))
			continue;
		if (!oti_enabled(ops->name)) {
			sdp_dbg(OTI, "transport %s disabled by the transports tunable", ops->name);
			continue;
		}
		int ret = ops->init();
		if (ret == -ENODEV) {
			sdp_dbg(OTI, "transport %s: nothing to offer on this host", ops->name);
			continue;
		}
		if (ret) {
			sdp_warn(OTI, "transport %s: init failed (%d)", ops->name, ret);
			continue;
		}
		oti_up[i] = true;
		oti_nup++;
		sdp_dbg(OTI, "transport %s ready", ops->name);
	}
	oti_ready = true;
	n = oti_nup;
	pthread_mutex_unlock(&oti_lock);
	return n;
}

void oti_fini(void)
{
	pthread_mutex_lock(&oti_lock);
	if (oti_ready) {
		/* Reverse order of init, as for any stack of layers. */
		for (size_t i = oti_count(); i-- > 0;) {
			if (oti_up[i])
				oti_at(i)->fini();
			oti_up[i] = false;
		}
		oti_nup = 0;
		oti_ready = false;
	}
	pthread_mutex_unlock(&oti_lock);
}

int oti_select_all(const struct sockaddr *local, const struct sockaddr *remote,
		   const struct oti_ops **out, int max)
{
	int n = 0;

	pthread_mutex_lock(&oti_lock);
	for (size_t i = 0; oti_ready && i < oti_count() && n < max; i++) {
		const struct oti_ops *ops = oti_at(i);

		if (!oti_up[i] || !oti_enabled(ops->name))
			continue;
		if (ops->probe(local, remote) == 0)
			out[n++] = ops;
	}
	pthread_mutex_unlock(&oti_lock);
	return n;
}

const struct oti_ops *oti_select(const struct sockaddr *local, const struct sockaddr *remote)
{
	const struct oti_ops *found = NULL;

	return oti_select_all(local, remote, &found, 1) ? found : NULL;
}

const struct oti_ops *oti_find(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < oti_count(); i++)
		if (!strcmp(oti_at(i)->name, name))
			return oti_at(i);
	return NULL;
}

int oti_test_backend(const struct oti_ops *ops)
{
	int ret = -EBUSY;

	pthread_mutex_lock(&oti_lock);
	if (!oti_ready) {
		oti_test_ops = ops;
		ret = 0;
	}
	pthread_mutex_unlock(&oti_lock);
	return ret;
}

const char *oti_name(unsigned int i)
{
	return i < OTI_NBUILTIN ? oti_builtin[i]->name : NULL;
}
