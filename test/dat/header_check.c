/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * header_check: dat/dat_iw_extensions.h, installed as
 * <dat2/dat_iw_extensions.h>, as a DAPL program uses it: after
 * <dat2/udat.h>, linked with -ldat2 only.  Every type, enum value and
 * macro of the header is used here; the values the wire and the provider
 * rely on are static assertions, so a wrong one fails the build (and so
 * `make check`).  The SSP calls (macros over dat_extension_op) are in a
 * function that is compiled and linked but never called: there is no
 * RDMA device in `make check`.
 *
 * The header must also be usable from C++: header_check_cxx.sh compiles
 * this file with `g++ -fsyntax-only -x c++` when g++ is installed.
 */
#include <dat2/udat.h>
#include "dat_iw_extensions.h"

#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
#define HC_ASSERT(e) static_assert(e, #e)
#else
#define HC_ASSERT(e) _Static_assert(e, #e)
#endif

/* the event and the handle type sit at the bases libdat2 gives the iWARP
 * extension */
HC_ASSERT((long)DAT_IW_SOCKET_DOWN_EVENT == (long)DAT_IW_EXTENSION_RANGE_BASE);
HC_ASSERT((long)DAT_IW_HANDLE_TYPE_SSP == (long)DAT_HANDLE_TYPE_EXTENSION_BASE);

HC_ASSERT(DAT_IW_SSP_STATE_OPERATIONAL == 0);
HC_ASSERT(DAT_IW_SSP_STATE_NON_OPERATIONAL == 1);

HC_ASSERT(DAT_IW_SSP_FIELD_IA_HANDLE == 0x01);
HC_ASSERT(DAT_IW_SSP_FIELD_SOCKET_ID == 0x02);
HC_ASSERT(DAT_IW_SSP_FIELD_EVD_HANDLE == 0x04);
HC_ASSERT(DAT_IW_SSP_FIELD_EP_HANDLE == 0x08);
HC_ASSERT(DAT_IW_SSP_FIELD_SSP_STATE == 0x10);
HC_ASSERT(DAT_IW_SSP_FIELD_ALL == 0x1F);
HC_ASSERT(DAT_IW_SSP_FIELD_ALL ==
	  (DAT_IW_SSP_FIELD_IA_HANDLE | DAT_IW_SSP_FIELD_SOCKET_ID |
	   DAT_IW_SSP_FIELD_EVD_HANDLE | DAT_IW_SSP_FIELD_EP_HANDLE |
	   DAT_IW_SSP_FIELD_SSP_STATE));

HC_ASSERT(DAT_IW_SSP_CREATE_OP == 0);
HC_ASSERT(DAT_IW_SSP_FREE_OP == 1);
HC_ASSERT(DAT_IW_SSP_QUERY_OP == 2);
HC_ASSERT(DAT_IW_SOCKET_CONNECT_OP == 3);

HC_ASSERT(DAT_IW_EXTENSION_VERSION == 201);
/* the socket is a file descriptor */
HC_ASSERT(sizeof(DAT_IW_SOCKET) == sizeof(int));
HC_ASSERT(sizeof(DAT_IW_SSP_HANDLE) == sizeof(DAT_HANDLE));

/* Every call of the extension, with arguments of the documented types.
 * Never called (its address is taken in main). */
static DAT_RETURN ssp_calls(DAT_IA_HANDLE ia, DAT_EP_HANDLE ep, DAT_EVD_HANDLE evd,
			    DAT_IW_SOCKET sock)
{
	static char final_msg[] = "final streaming-mode message";
	static char pdata[] = "private data";
	DAT_IW_SSP_HANDLE ssp = DAT_HANDLE_NULL;
	DAT_IW_SSP_PARAM param;
	DAT_IW_SSP_PARAM_MASK mask = DAT_IW_SSP_FIELD_ALL;
	DAT_RETURN rc;

	rc = dat_iw_ssp_create(ia, sock, ep, evd, final_msg, (DAT_COUNT)sizeof(final_msg),
			       &ssp);
	if (rc != DAT_SUCCESS)
		return rc;
	rc = dat_iw_ssp_query(ssp, mask, &param);
	if (rc == DAT_SUCCESS && param.ssp_state == DAT_IW_SSP_STATE_OPERATIONAL &&
	    param.socket_id == sock && param.ia_handle == ia && param.ep_handle == ep &&
	    param.evd_handle == evd)
		rc = dat_iw_ssp_free(ssp);
	if (rc != DAT_SUCCESS)
		return rc;
	return dat_iw_socket_connect(ep, sock, DAT_TIMEOUT_INFINITE,
				     (DAT_COUNT)sizeof(pdata), pdata);
}

/* What a consumer does with a DAT_IW_SOCKET_DOWN_EVENT. */
static int socket_down(const DAT_EVENT *ev, DAT_IW_SSP_HANDLE ssp, DAT_IW_SOCKET sock)
{
	const DAT_IW_EXTENSION_EVENT_DATA *d =
		(const DAT_IW_EXTENSION_EVENT_DATA *)ev->event_extension_data;
	DAT_IW_EVENT_NUMBER n = DAT_IW_SOCKET_DOWN_EVENT;

	return (long)ev->event_number == (long)n && d->ssp_handle == ssp && d->socket_id == sock;
}

int main(void)
{
	static const struct {
		const char *got, *want;
	} strs[] = {
		/* what libdaplsdp's dat_ia_query lists (dat/ia.c) */
		{ DAT_EXTENSION_ATTR, "DAT_EXTENSION_INTERFACE" },
		{ DAT_EXTENSION_ATTR_VERSION, "DAT_EXTENSION_VERSION" },
		{ DAT_EXTENSION_ATTR_VERSION_VALUE, "2.0.1" },
		{ DAT_IW_ATTR_SSP, "DAT_IW_ATTR_SSP" },
	};
	DAT_RETURN (*volatile calls)(DAT_IA_HANDLE, DAT_EP_HANDLE, DAT_EVD_HANDLE,
				     DAT_IW_SOCKET) = ssp_calls;
	DAT_HANDLE_IW_EXT_TYPE ht = DAT_IW_HANDLE_TYPE_SSP;
	DAT_IW_OP op = DAT_IW_SOCKET_CONNECT_OP;
	DAT_IW_SSP_STATE st = DAT_IW_SSP_STATE_NON_OPERATIONAL;
	DAT_EVENT ev;
	DAT_IW_EXTENSION_EVENT_DATA *d;
	int fails = 0;

	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		if (strcmp(strs[i].got, strs[i].want) != 0) {
			printf("FAIL: \"%s\", want \"%s\"\n", strs[i].got, strs[i].want);
			fails++;
		}
	}
	/* the event data fits where libdat2 puts it */
	HC_ASSERT(sizeof(DAT_IW_EXTENSION_EVENT_DATA) <= sizeof(ev.event_extension_data));
	memset(&ev, 0, sizeof(ev));
	ev.event_number = (DAT_EVENT_NUMBER)DAT_IW_SOCKET_DOWN_EVENT;
	d = (DAT_IW_EXTENSION_EVENT_DATA *)ev.event_extension_data;
	d->ssp_handle = (DAT_IW_SSP_HANDLE)&ev;
	d->socket_id = 7;
	if (!socket_down(&ev, (DAT_IW_SSP_HANDLE)&ev, 7)) {
		printf("FAIL: socket-down event data\n");
		fails++;
	}
	if (calls == NULL || (int)ht == 0 || (int)op != 3 || (int)st != 1) {
		printf("FAIL: enum values\n");
		fails++;
	}
	printf("%s: dat_iw_extensions.h, version %d (%s)\n", fails ? "FAIL" : "ok",
	       DAT_IW_EXTENSION_VERSION, DAT_EXTENSION_ATTR_VERSION_VALUE);
	return fails ? 1 : 0;
}
