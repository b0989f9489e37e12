/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libdaplsdp: protection zones (a verbs PD each) and LMRs (a verbs MR
 * each: lmr_context is the lkey, rmr_context the rkey).  Only
 * DAT_MEM_TYPE_VIRTUAL with DAT_VA_TYPE_VA is supported.
 */
#include <stdlib.h>
#include <string.h>

#include "provider.h"

DAT_RETURN dsp_pz_create(DAT_IA_HANDLE ia_handle, DAT_PZ_HANDLE *out)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_pz *pz;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (!out)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG2);
	pz = calloc(1, sizeof(*pz));
	if (!pz)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	dsp_hdr_init(&pz->h, ia, DSP_T_PZ);
	pz->pd = vc_pd_new(ia->verbs);
	if (!pz->pd) {
		free(pz);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_PROTECTION_DOMAIN);
	}
	pthread_mutex_lock(&ia->lock);
	dsp_list_add(&ia->pzs, &pz->h);
	pthread_mutex_unlock(&ia->lock);
	*out = pz;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_pz_query(DAT_PZ_HANDLE h, DAT_PZ_PARAM_MASK mask, DAT_PZ_PARAM *param)
{
	struct dsp_pz *pz = h;

	if (!dsp_check(pz, DSP_T_PZ))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (!param)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	param->ia_handle = pz->h.ia;
	return DAT_SUCCESS;
}

void dsp_pz_destroy(struct dsp_pz *pz)
{
	struct dsp_ia *ia = pz->h.ia;

	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->pzs, &pz->h);
	pthread_mutex_unlock(&ia->lock);
	pz->h.magic = 0;
	vc_pd_free(pz->pd);
	free(pz);
}

DAT_RETURN dsp_pz_free(DAT_PZ_HANDLE h)
{
	struct dsp_pz *pz = h;
	int refs;

	if (!dsp_check(pz, DSP_T_PZ))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	pthread_mutex_lock(&pz->h.ia->lock);
	refs = pz->refs;
	pthread_mutex_unlock(&pz->h.ia->lock);
	if (refs > 0)
		return DSP_ERR(DAT_INVALID_STATE, DAT_INVALID_STATE_PZ_IN_USE);
	dsp_pz_destroy(pz);
	return DAT_SUCCESS;
}

static int priv_to_access(const struct dsp_ia *ia, DAT_MEM_PRIV_FLAGS priv)
{
	int acc = 0;

	if (priv & DAT_MEM_PRIV_LOCAL_WRITE_FLAG)
		acc |= IBV_ACCESS_LOCAL_WRITE;
	if (priv & DAT_MEM_PRIV_REMOTE_READ_FLAG)
		acc |= IBV_ACCESS_REMOTE_READ;
	/* verbs wants local write with remote write */
	if (priv & DAT_MEM_PRIV_REMOTE_WRITE_FLAG)
		acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	/* iWARP: an RDMA read's sink is written by the peer's read response
	 * as if by an RDMA write, so a locally writable region must be
	 * remotely writable to serve as one (provider attribute
	 * rdma_write_for_rdma_read_req says so too). */
	if (ia->iwarp && (acc & IBV_ACCESS_LOCAL_WRITE))
		acc |= IBV_ACCESS_REMOTE_WRITE;
	return acc;
}

DAT_RETURN dsp_lmr_create(DAT_IA_HANDLE ia_handle, DAT_MEM_TYPE mem_type,
			  DAT_REGION_DESCRIPTION region, DAT_VLEN length, DAT_PZ_HANDLE pz_handle,
			  DAT_MEM_PRIV_FLAGS priv, DAT_VA_TYPE va_type, DAT_LMR_HANDLE *lmr_handle,
			  DAT_LMR_CONTEXT *lmr_context, DAT_RMR_CONTEXT *rmr_context,
			  DAT_VLEN *reg_len, DAT_VADDR *reg_addr)
{
	struct dsp_ia *ia = ia_handle;
	struct dsp_pz *pz = pz_handle;
	struct dsp_lmr *lmr;

	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	if (mem_type != DAT_MEM_TYPE_VIRTUAL)
		return DSP_NOT_IMPL;
	if (!region.for_va)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	if (length == 0)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG4);
	if (!dsp_check(pz, DSP_T_PZ) || pz->h.ia != ia)
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_PZ);
	if (priv & ~DAT_MEM_PRIV_ALL_FLAG)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG6);
	if (va_type != DAT_VA_TYPE_VA)
		return DSP_NOT_IMPL;
	if (!lmr_handle)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG8);
	lmr = calloc(1, sizeof(*lmr));
	if (!lmr)
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	dsp_hdr_init(&lmr->h, ia, DSP_T_LMR);
	lmr->mr = vc_mr_reg(pz->pd, region.for_va, (size_t)length, priv_to_access(ia, priv));
	if (!lmr->mr) {
		DSP_DBG("ibv_reg_mr(%p, %llu): failed", region.for_va,
			(unsigned long long)length);
		free(lmr);
		return DSP_ERR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
	}
	lmr->pz = pz;
	lmr->mem_type = mem_type;
	lmr->region = region;
	lmr->length = length;
	lmr->priv = priv;
	lmr->va_type = va_type;
	pthread_mutex_lock(&ia->lock);
	pz->refs++;
	dsp_list_add(&ia->lmrs, &lmr->h);
	pthread_mutex_unlock(&ia->lock);
	*lmr_handle = lmr;
	if (lmr_context)
		*lmr_context = lmr->mr->lkey;
	if (rmr_context)
		*rmr_context = lmr->mr->rkey;
	if (reg_len)
		*reg_len = length;
	if (reg_addr)
		*reg_addr = (DAT_VADDR)(uintptr_t)region.for_va;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_lmr_query(DAT_LMR_HANDLE h, DAT_LMR_PARAM_MASK mask, DAT_LMR_PARAM *param)
{
	struct dsp_lmr *lmr = h;

	if (!dsp_check(lmr, DSP_T_LMR))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
	if (!param)
		return DSP_ERR(DAT_INVALID_PARAMETER, DAT_INVALID_ARG3);
	(void)mask;
	param->ia_handle = lmr->h.ia;
	param->mem_type = lmr->mem_type;
	param->region_desc = lmr->region;
	param->length = lmr->length;
	param->pz_handle = lmr->pz;
	param->mem_priv = lmr->priv;
	param->va_type = lmr->va_type;
	param->lmr_context = lmr->mr->lkey;
	param->rmr_context = lmr->mr->rkey;
	param->registered_size = lmr->length;
	param->registered_address = (DAT_VADDR)(uintptr_t)lmr->region.for_va;
	return DAT_SUCCESS;
}

void dsp_lmr_destroy(struct dsp_lmr *lmr)
{
	struct dsp_ia *ia = lmr->h.ia;

	pthread_mutex_lock(&ia->lock);
	dsp_list_del(&ia->lmrs, &lmr->h);
	lmr->pz->refs--;
	pthread_mutex_unlock(&ia->lock);
	lmr->h.magic = 0;
	vc_mr_dereg(lmr->mr);
	free(lmr);
}

DAT_RETURN dsp_lmr_free(DAT_LMR_HANDLE h)
{
	struct dsp_lmr *lmr = h;

	if (!dsp_check(lmr, DSP_T_LMR))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_LMR);
	dsp_lmr_destroy(lmr);
	return DAT_SUCCESS;
}

/* Coherent memory: nothing to do. */
DAT_RETURN dsp_lmr_sync_rdma_read(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	(void)iov;
	(void)n;
	return DAT_SUCCESS;
}

DAT_RETURN dsp_lmr_sync_rdma_write(DAT_IA_HANDLE ia, const DAT_LMR_TRIPLET *iov, DAT_VLEN n)
{
	if (!dsp_check(ia, DSP_T_IA))
		return DSP_ERR(DAT_INVALID_HANDLE, DAT_INVALID_HANDLE_IA);
	(void)iov;
	(void)n;
	return DAT_SUCCESS;
}
