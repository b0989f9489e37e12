/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * secure_env: what libsdp takes from the environment, said on stdout one
 * item a line, for secure_env.sh, which runs it once as it is and once
 * as a set-group-ID copy (a secure-execution process, AT_SECURE).  The
 * logger is started as the engine starts it (sdp_log_init), so that what
 * it says about the environment goes to stderr or to SDP_LOG_FILE.
 */
#include <stdio.h>
#include <sys/auxv.h>

#include "log.h"
#include "tunables.h"

int main(void)
{
	const char *conf = tun_getenv("LIBSDP_CONFIG_FILE");

	sdp_log_init();
	printf("secure %d\n", getauxval(AT_SECURE) != 0);
	printf("recv_bufs %ld\n", tun_int(TUN_recv_bufs));
	printf("log_level %ld\n", tun_int(TUN_log_level));
	printf("log_file \"%s\"\n", tun_str(TUN_log_file));
	printf("config %s\n", conf ? conf : "(none)");
	return fflush(stdout) ? 1 : 0;
}
