/* SPDX-License-Identifier: BSD-2-Clause */
#include "tunables.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "log.h"

enum tun_type { TUN_TYPE_INT, TUN_TYPE_STR };

struct tun_desc {
	const char *name;
	enum tun_type type;
	const char *def;
	long min, max;
	const char *help;
};

static const struct tun_desc tun_table[TUN_COUNT] = {
#define TUNABLE(id, type, def, min, max, help) \
	[TUN_##id] = { #id, TUN_TYPE_##type, def, min, max, help },
#include "tunables.def"
#undef TUNABLE
};

#define TUN_STR_MAX 256

struct tun_value {
	long i;
	char s[TUN_STR_MAX];
	int from_env;
};

/* What the environment said that tun_report_env() has to tell. */
enum tun_note {
	TUN_NOTE_NONE,
	TUN_NOTE_BAD,		/* a value that does not parse: the default stays */
	TUN_NOTE_IGNORED,	/* set, but the environment is not trusted */
};

/* Variables other than SDP_<NAME> that tun_getenv() ignored. */
#define TUN_OTHER_MAX 4

/* Protects everything below but the readers' path: values are read on
 * every message and set only at start-up, so once tun_loaded is set a
 * read takes no lock (tun_get): an integer is loaded atomically, and a
 * string is copied by its reader (the buffer may be rewritten by a late
 * tun_set()). */
static pthread_mutex_t tun_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tun_value tun_values[TUN_COUNT];
static atomic_int tun_loaded;
/* Secure execution (AT_SECURE: set-user-ID, set-group-ID, file
 * capabilities): whoever set the environment has fewer rights than the
 * process, so no variable of ours is taken from it. */
static bool tun_secure;
static int tun_secure_forced = -1;	/* tun_reset_as(): tests; -1 = ask the kernel */
static unsigned char tun_notes[TUN_COUNT];	/* enum tun_note, not yet reported */
static char tun_bad[TUN_COUNT][176];	/* the refused value as shown, for TUN_NOTE_BAD */
static const char *tun_other[TUN_OTHER_MAX];
static int tun_nother;
static atomic_bool tun_notes_pending;	/* tun_report_env() has something to say */

static int tun_parse(const struct tun_desc *d, const char *text, struct tun_value *v)
{
	if (d->type == TUN_TYPE_STR) {
		if (strlen(text) >= TUN_STR_MAX)
			return -EINVAL;
		strcpy(v->s, text);
		return 0;
	}
	char *end;
	errno = 0;
	/* Hexadecimal with 0x; otherwise decimal, so "010" is ten. */
	bool hex = text[0] == '0' && (text[1] == 'x' || text[1] == 'X');
	long n = strtol(text, &end, hex ? 16 : 10);
	if (errno || end == text || *end != '\0' || n < d->min || n > d->max)
		return -EINVAL;
	v->i = n;
	return 0;
}

static void tun_env_name(const char *name, char *out, size_t cap)
{
	size_t i = 0, j;

	i = (size_t)snprintf(out, cap, "SDP_");
	for (j = 0; name[j] && i + 1 < cap; j++)
		out[i++] = (char)toupper((unsigned char)name[j]);
	out[i] = '\0';
}

/* text as a log message may show it: at most 40 bytes, anything but
 * printable ASCII as \xNN, quoted. */
static void tun_show(const char *text, char *out, size_t cap)
{
	size_t o = 0, i;

	out[o++] = '"';
	for (i = 0; text[i] && i < 40 && o + 8 < cap; i++) {
		unsigned char c = (unsigned char)text[i];

		if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
	}
	if (text[i] && o + 5 < cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o++] = '"';
	out[o] = '\0';
}

/* Publish v as tunable id's value (tun_lock held): the integer with an
 * atomic store, for the readers that take no lock. */
static void tun_store(int id, const struct tun_value *v)
{
	__atomic_store_n(&tun_values[id].i, v->i, __ATOMIC_RELAXED);
	memcpy(tun_values[id].s, v->s, sizeof(v->s));
	tun_values[id].from_env = v->from_env;
}

static void tun_load_locked(void)
{
	char env[64];

	tun_secure = tun_secure_forced >= 0 ? tun_secure_forced : getauxval(AT_SECURE) != 0;
	for (int id = 0; id < TUN_COUNT; id++) {
		const struct tun_desc *d = &tun_table[id];
		struct tun_value val, *v = &val;

		/* Defaults are ours and always parse. */
		(void)tun_parse(d, d->def, v);
		v->from_env = 0;
		tun_notes[id] = TUN_NOTE_NONE;
		tun_env_name(d->name, env, sizeof(env));
		const char *e = getenv(env);

		if (!e) {
			tun_store(id, v);
			continue;
		}
		if (tun_secure) {
			tun_notes[id] = TUN_NOTE_IGNORED;
		} else if (tun_parse(d, e, v) == 0) {
			v->from_env = 1;
			tun_store(id, v);
			continue;
		} else {
			/* The default stays (or what sdp.conf sets). */
			(void)tun_parse(d, d->def, v);
			tun_notes[id] = TUN_NOTE_BAD;
			tun_show(e, tun_bad[id], sizeof(tun_bad[id]));
		}
		tun_store(id, v);
		atomic_store(&tun_notes_pending, true);
	}
	atomic_store_explicit(&tun_loaded, 1, memory_order_release);
}

static struct tun_value *tun_get(enum tun_id id)
{
	if (!atomic_load_explicit(&tun_loaded, memory_order_acquire)) {
		pthread_mutex_lock(&tun_lock);
		if (!atomic_load_explicit(&tun_loaded, memory_order_relaxed))
			tun_load_locked();
		pthread_mutex_unlock(&tun_lock);
	}
	return &tun_values[id];
}

long tun_int(enum tun_id id)
{
	return __atomic_load_n(&tun_get(id)->i, __ATOMIC_RELAXED);
}

const char *tun_str(enum tun_id id)
{
	return tun_get(id)->s;
}

/* The tunable called name, or -1. */
static int tun_find(const char *name)
{
	for (int id = 0; id < TUN_COUNT; id++)
		if (!strcmp(tun_table[id].name, name))
			return id;
	return -1;
}

int tun_set(const char *name, const char *value)
{
	int id = tun_find(name), ret = -ENOENT;

	pthread_mutex_lock(&tun_lock);
	if (!atomic_load_explicit(&tun_loaded, memory_order_relaxed))
		tun_load_locked();
	if (id >= 0) {
		struct tun_value v = tun_values[id];

		ret = tun_parse(&tun_table[id], value, &v);
		if (ret == 0 && !tun_values[id].from_env)
			tun_store(id, &v);
	}
	pthread_mutex_unlock(&tun_lock);
	return ret;
}

int tun_check(const char *name, const char *value, struct tun_limits *limits)
{
	int id = tun_find(name);
	struct tun_value v;

	if (id < 0)
		return -ENOENT;
	if (limits) {
		limits->is_int = tun_table[id].type == TUN_TYPE_INT;
		limits->min = tun_table[id].min;
		limits->max = tun_table[id].max;
		limits->max_len = TUN_STR_MAX - 1;
	}
	return tun_parse(&tun_table[id], value, &v);
}

void tun_list(FILE *out)
{
	char env[64];

	for (int id = 0; id < TUN_COUNT; id++) {
		const struct tun_desc *d = &tun_table[id];
		const struct tun_value *v = tun_get(id);

		tun_env_name(d->name, env, sizeof(env));
		if (d->type == TUN_TYPE_INT)
			fprintf(out, "%-24s %-28s %ld (default %s, %ld..%ld)\n",
				d->name, env, v->i, d->def, d->min, d->max);
		else
			fprintf(out, "%-24s %-28s \"%s\" (default \"%s\")\n",
				d->name, env, v->s, d->def);
		fprintf(out, "    %s\n", d->help);
	}
}

void tun_reset(void)
{
	pthread_mutex_lock(&tun_lock);
	tun_nother = 0;
	tun_load_locked();
	pthread_mutex_unlock(&tun_lock);
}

void tun_reset_as(int secure)
{
	pthread_mutex_lock(&tun_lock);
	tun_secure_forced = secure;
	pthread_mutex_unlock(&tun_lock);
	tun_reset();
}

const char *tun_getenv(const char *name)
{
	const char *v = getenv(name);

	if (!v)
		return NULL;
	pthread_mutex_lock(&tun_lock);
	if (!atomic_load_explicit(&tun_loaded, memory_order_relaxed))
		tun_load_locked();
	bool secure = tun_secure;

	if (secure) {
		int i = 0;

		while (i < tun_nother && strcmp(tun_other[i], name))
			i++;
		if (i == tun_nother && i < TUN_OTHER_MAX) {
			tun_other[tun_nother++] = name;
			atomic_store(&tun_notes_pending, true);
		}
	}
	pthread_mutex_unlock(&tun_lock);
	return secure ? NULL : v;
}

void tun_report_env(void)
{
	char ignored[TUN_OTHER_MAX * 40 + TUN_COUNT * 40] = "";
	size_t n = 0;

	if (!atomic_exchange(&tun_notes_pending, false))
		return;
	/* Said outside tun_lock: the logger reads tunables. */
	for (int id = 0; id < TUN_COUNT; id++) {
		const struct tun_desc *d = &tun_table[id];
		char env[64], bad[sizeof(tun_bad[0])];

		pthread_mutex_lock(&tun_lock);
		unsigned note = tun_notes[id];

		tun_notes[id] = TUN_NOTE_NONE;
		memcpy(bad, tun_bad[id], sizeof(bad));
		pthread_mutex_unlock(&tun_lock);
		tun_env_name(d->name, env, sizeof(env));
		if (note == TUN_NOTE_IGNORED) {
			n += (size_t)snprintf(ignored + n, sizeof(ignored) - n, " %s", env);
		} else if (note == TUN_NOTE_BAD && d->type == TUN_TYPE_INT) {
			sdp_err("tunables", "%s=%s ignored: not an integer from %ld to %ld; "
				"%s is %ld (default %s)", env, bad, d->min, d->max, d->name,
				tun_int((enum tun_id)id), d->def);
		} else if (note == TUN_NOTE_BAD) {
			sdp_err("tunables", "%s=%s ignored: longer than %d bytes; %s is \"%s\" "
				"(default \"%s\")", env, bad, TUN_STR_MAX - 1, d->name,
				tun_str((enum tun_id)id), d->def);
		}
	}
	pthread_mutex_lock(&tun_lock);
	for (int i = 0; i < tun_nother; i++)
		n += (size_t)snprintf(ignored + n, sizeof(ignored) - n, " %s", tun_other[i]);
	tun_nother = 0;
	pthread_mutex_unlock(&tun_lock);
	if (n)
		sdp_err("tunables", "secure execution (set-user-ID, set-group-ID or file "
			"capabilities): the environment is not trusted, ignored:%s", ignored);
}
