/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * dat_iw_extensions.h: the iWARP transport specific extension of DAT 2.0,
 * Socket Service Points (SSP), as libsdp's DAT provider (libdaplsdp)
 * implements it.
 *
 * A Socket Service Point turns a connected TCP socket, whose peer runs the
 * same software, into an RDMA connection of a DAT endpoint, the way iWARP's
 * MPA moves a TCP stream from streaming mode to RDMA mode:
 *
 *   passive side: dat_iw_ssp_create(ia, sock, ep, evd, final_sm_msg, len,
 *                 &ssp) sends the final streaming-mode message over the
 *                 socket, then waits for the peer's request; the request
 *                 arrives as one DAT_CONNECTION_REQUEST_EVENT on evd, for
 *                 ep; dat_cr_accept() or dat_cr_reject() answers it.
 *   active side:  reads the final message from the socket by its own
 *                 means, then dat_iw_socket_connect(ep, sock, timeout,
 *                 private_data_size, private_data); the outcome arrives on
 *                 ep's connect EVD (ESTABLISHED, PEER_REJECTED, TIMED_OUT,
 *                 ...).
 *
 * This header follows the one OFA DAPL published in 2007 (never installed
 * by its build): the same names, values and argument lists.  It fixes its
 * macros (which could not be used: a space before the parameter list) and
 * adds what that header left out: the version, the socket-down event and
 * its event data.  Those additions are libsdp's and marked so.
 *
 * Include after <dat2/udat.h>; link with -ldat2 only.
 */
#ifndef _DAT_IW_EXTENSIONS_H_
#define _DAT_IW_EXTENSIONS_H_

#include <dat2/udat.h>

#ifndef DAT_EXTENSIONS
#error "dat_iw_extensions.h needs DAT_EXTENSIONS (udat_config.h sets it by default)"
#endif

/* Provider-specific attributes of an IA that has the extension, as
 * dat_ia_query() lists them (DAT_PROVIDER_FIELD_PROVIDER_SPECIFIC_ATTR). */
#define DAT_EXTENSION_ATTR		 "DAT_EXTENSION_INTERFACE"
#define DAT_EXTENSION_ATTR_VERSION	 "DAT_EXTENSION_VERSION"
#define DAT_EXTENSION_ATTR_VERSION_VALUE "2.0.1"
#define DAT_IW_ATTR_SSP			 "DAT_IW_ATTR_SSP"

/* libsdp: the extension's version as a number (2.0.1), as
 * DAT_IB_EXTENSION_VERSION is for the IB extension. */
#define DAT_IW_EXTENSION_VERSION 201

typedef enum dat_handle_iw_ext_type {
	DAT_IW_HANDLE_TYPE_SSP = DAT_HANDLE_TYPE_EXTENSION_BASE,
} DAT_HANDLE_IW_EXT_TYPE;

typedef DAT_HANDLE DAT_IW_SSP_HANDLE;

typedef enum dat_iw_ssp_state {
	DAT_IW_SSP_STATE_OPERATIONAL,
	DAT_IW_SSP_STATE_NON_OPERATIONAL
} DAT_IW_SSP_STATE;

/* The socket: a file descriptor of a connected TCP socket. */
typedef int DAT_IW_SOCKET;

typedef struct dat_iw_ssp_param {
	DAT_IA_HANDLE ia_handle;
	DAT_IW_SOCKET socket_id;
	DAT_EVD_HANDLE evd_handle;
	DAT_EP_HANDLE ep_handle;
	DAT_IW_SSP_STATE ssp_state;
} DAT_IW_SSP_PARAM;

typedef enum dat_iw_ssp_param_mask {
	DAT_IW_SSP_FIELD_IA_HANDLE = 0x01,
	DAT_IW_SSP_FIELD_SOCKET_ID = 0x02,
	DAT_IW_SSP_FIELD_EVD_HANDLE = 0x04,
	DAT_IW_SSP_FIELD_EP_HANDLE = 0x08,
	DAT_IW_SSP_FIELD_SSP_STATE = 0x10,
	DAT_IW_SSP_FIELD_ALL = 0x1F
} DAT_IW_SSP_PARAM_MASK;

typedef enum dat_iw_op {
	DAT_IW_SSP_CREATE_OP,
	DAT_IW_SSP_FREE_OP,
	DAT_IW_SSP_QUERY_OP,
	DAT_IW_SOCKET_CONNECT_OP
} DAT_IW_OP;

/*
 * libsdp: events of the extension.  DAT_IW_SOCKET_DOWN_EVENT comes on an
 * SSP's EVD when its socket went down (the peer closed or reset it) before
 * a request came; the SSP is then NON_OPERATIONAL.  event_extension_data
 * holds a DAT_IW_EXTENSION_EVENT_DATA.
 */
typedef enum dat_iw_event_number {
	DAT_IW_SOCKET_DOWN_EVENT = DAT_IW_EXTENSION_RANGE_BASE,
} DAT_IW_EVENT_NUMBER;

typedef struct dat_iw_extension_event_data {
	DAT_IW_SSP_HANDLE ssp_handle;
	DAT_IW_SOCKET socket_id;
} DAT_IW_EXTENSION_EVENT_DATA;

/* dat_iw_ssp_create: an SSP on an already connected socket. */
#define dat_iw_ssp_create(ia, socket_id, ep_handle, evd_handle, final_sm_msg, \
			  final_sm_msg_len, ssp_handle) \
	dat_extension_op(IN (DAT_IA_HANDLE)(ia), \
			 IN (DAT_IW_OP)DAT_IW_SSP_CREATE_OP, \
			 IN (DAT_IA_HANDLE)(ia), \
			 IN (DAT_IW_SOCKET)(socket_id), \
			 IN (DAT_EP_HANDLE)(ep_handle), \
			 IN (DAT_EVD_HANDLE)(evd_handle), \
			 IN (DAT_PVOID)(final_sm_msg), \
			 IN (DAT_COUNT)(final_sm_msg_len), \
			 OUT (DAT_IW_SSP_HANDLE *)(ssp_handle))

/* dat_iw_ssp_free: the SSP is gone; a request that comes later is
 * rejected. */
#define dat_iw_ssp_free(ssp_handle) \
	dat_extension_op(IN (DAT_IW_SSP_HANDLE)(ssp_handle), \
			 IN (DAT_IW_OP)DAT_IW_SSP_FREE_OP)

/* dat_iw_ssp_query: the SSP's parameters selected by the mask. */
#define dat_iw_ssp_query(ssp_handle, ssp_param_mask, ssp_param) \
	dat_extension_op(IN (DAT_IW_SSP_HANDLE)(ssp_handle), \
			 IN (DAT_IW_OP)DAT_IW_SSP_QUERY_OP, \
			 IN (DAT_IW_SSP_PARAM_MASK)(ssp_param_mask), \
			 OUT (DAT_IW_SSP_PARAM *)(ssp_param))

/* dat_iw_socket_connect: the active side's request over the socket. */
#define dat_iw_socket_connect(ep_handle, socket_id, timeout, private_data_size, \
			      private_data) \
	dat_extension_op(IN (DAT_EP_HANDLE)(ep_handle), \
			 IN (DAT_IW_OP)DAT_IW_SOCKET_CONNECT_OP, \
			 IN (DAT_IW_SOCKET)(socket_id), \
			 IN (DAT_TIMEOUT)(timeout), \
			 IN (DAT_COUNT)(private_data_size), \
			 IN (const DAT_PVOID)(private_data))

#endif /* _DAT_IW_EXTENSIONS_H_ */
