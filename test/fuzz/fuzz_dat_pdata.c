/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The uDAPL provider's connection private data, as the peer's CM
 * request, accept or reject carries it, read by the verbs core the
 * provider stands on (transports/verbs/vcore.c): librdmacm hands up to
 * 255 bytes (private_data_len is a uint8_t).  The core unframes the
 * consumer's bytes into a buffer of VC_PDATA_MAX (the provider's event
 * copy), asks whether a request wants the iWARP RTR handshake and reads
 * an accept's RTR target.  Each may only
 * read the input and write the buffer, and what it reports must be what
 * the framing says.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "provider.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* What the CM could deliver. */
	if (size > 255)
		return 0;

	/* Exact-size heap copies: ASan then sees a byte read past either. */
	uint8_t *in = malloc(size ? size : 1);
	uint8_t *out = malloc(VC_PDATA_MAX);
	uint64_t addr = 0;
	uint32_t rkey = 0;

	if (!in || !out)
		abort();
	if (size)
		memcpy(in, data, size);
	int n = vc_unframe(size ? in : NULL, size, out);

	if (n >= 0) {
		FUZZ_CHECK(size >= 1 && n == in[0] && (size_t)n + 1 <= size);
		FUZZ_CHECK(!memcmp(out, in + 1, (size_t)n));
	} else {
		FUZZ_CHECK(n == -EPROTO);
	}
	if (vc_rtr_asked(size ? in : NULL, size))
		FUZZ_CHECK(size >= 2 && (size_t)in[0] + 2 <= size &&
			   (in[1 + in[0]] & VC_RTR_WANTED));
	if (vc_rtr_target(size ? in : NULL, size, &addr, &rkey)) {
		FUZZ_CHECK((size_t)in[0] + 1 + VC_RTR_LEN <= size);
		const uint8_t *t = in + 1 + in[0];
		uint64_t a = 0;

		for (int i = 0; i < 8; i++)
			a = a << 8 | t[i];
		FUZZ_CHECK(a == addr);
		FUZZ_CHECK(rkey == ((uint32_t)t[8] << 24 | (uint32_t)t[9] << 16 |
				    (uint32_t)t[10] << 8 | t[11]));
	}
	free(in);
	free(out);
	return 0;
}
