/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The registration cache (regcache.h).  For now every get registers and
 * every put deregisters: correct, not yet fast.
 */
#include <errno.h>
#include <stdlib.h>

#include "regcache.h"

struct sdp_regcache {
	const struct oti_ops *t;
	struct oti_ep *ep;
	unsigned access;
};

struct sdp_reg {
	struct oti_mr *mr;
};

struct sdp_regcache *regcache_new(const struct oti_ops *t, struct oti_ep *ep, unsigned access)
{
	struct sdp_regcache *rc = calloc(1, sizeof(*rc));

	if (rc) {
		rc->t = t;
		rc->ep = ep;
		rc->access = access;
	}
	return rc;
}

int regcache_get(struct sdp_regcache *rc, void *addr, size_t len, struct sdp_reg **reg,
		 struct oti_mr **mr)
{
	struct sdp_reg *r = calloc(1, sizeof(*r));
	int ret;

	if (!r)
		return -ENOMEM;
	ret = rc->t->mr_reg(rc->ep, addr, len, rc->access, &r->mr);
	if (ret) {
		free(r);
		return ret;
	}
	*reg = r;
	*mr = r->mr;
	return 0;
}

void regcache_put(struct sdp_regcache *rc, struct sdp_reg *reg)
{
	rc->t->mr_dereg(reg->mr);
	free(reg);
}

void regcache_free(struct sdp_regcache *rc)
{
	free(rc);
}

void sdp_regcache_invalidate(const void *addr, size_t len)
{
	(void)addr;
	(void)len;
}

void sdp_regcache_tracking_on(void)
{
}
