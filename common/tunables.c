/* SPDX-License-Identifier: BSD-2-Clause */
#include "tunables.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

/* Protects tun_values and tun_loaded; values are read far more often than
 * set, but a set only happens at start-up, so one mutex is enough. */
static pthread_mutex_t tun_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tun_value tun_values[TUN_COUNT];
static int tun_loaded;

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

static void tun_load_locked(void)
{
	char env[64];

	for (int id = 0; id < TUN_COUNT; id++) {
		const struct tun_desc *d = &tun_table[id];
		struct tun_value *v = &tun_values[id];

		/* Defaults are ours and always parse. */
		(void)tun_parse(d, d->def, v);
		v->from_env = 0;
		tun_env_name(d->name, env, sizeof(env));
		const char *e = getenv(env);
		/* A malformed environment value is ignored (the default
		 * stays); the logger reports it once it exists. */
		if (e && tun_parse(d, e, v) == 0)
			v->from_env = 1;
		else if (e)
			(void)tun_parse(d, d->def, v);
	}
	tun_loaded = 1;
}

static struct tun_value *tun_get(enum tun_id id)
{
	pthread_mutex_lock(&tun_lock);
	if (!tun_loaded)
		tun_load_locked();
	pthread_mutex_unlock(&tun_lock);
	return &tun_values[id];
}

long tun_int(enum tun_id id)
{
	return tun_get(id)->i;
}

const char *tun_str(enum tun_id id)
{
	return tun_get(id)->s;
}

int tun_set(const char *name, const char *value)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&tun_lock);
	if (!tun_loaded)
		tun_load_locked();
	for (int id = 0; id < TUN_COUNT; id++) {
		if (strcmp(tun_table[id].name, name))
			continue;
		struct tun_value v = tun_values[id];
		ret = tun_parse(&tun_table[id], value, &v);
		if (ret == 0 && !tun_values[id].from_env)
			tun_values[id] = v;
		break;
	}
	pthread_mutex_unlock(&tun_lock);
	return ret;
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
	tun_load_locked();
	pthread_mutex_unlock(&tun_lock);
}
