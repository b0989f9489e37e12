/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shm transport's rings: records in order across the end of the ring,
 * flow control, and a hostile peer's indexes and headers, which must be
 * refused before a byte outside the ring is touched.  The ring lives in a
 * buffer with guard bytes on both sides that must stay untouched.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "shm/shm_ring.h"

#define SIZE 256u
#define GUARD 64u

static struct shm_ring_ctl ctl;
static uint8_t mem[GUARD + SIZE + GUARD];
static struct shm_ring prod, cons;

static void setup(void)
{
	memset(&ctl, 0, sizeof(ctl));
	memset(mem, 0xa5, sizeof(mem));
	cr_assert_eq(shm_ring_attach(&prod, &ctl, mem + GUARD, SIZE), 0);
	cr_assert_eq(shm_ring_attach(&cons, &ctl, mem + GUARD, SIZE), 0);
}

static void guards_intact(void)
{
	for (unsigned i = 0; i < GUARD; i++) {
		cr_assert_eq(mem[i], 0xa5, "guard before the ring written at %u", i);
		cr_assert_eq(mem[GUARD + SIZE + i], 0xa5, "guard after the ring written at %u", i);
	}
}

TestSuite(shm_ring, .init = setup);

Test(shm_ring, attach_rejects_bad_sizes)
{
	struct shm_ring r;

	cr_expect_eq(shm_ring_attach(&r, &ctl, mem, 0), -EINVAL);
	cr_expect_eq(shm_ring_attach(&r, &ctl, mem, 32), -EINVAL);
	cr_expect_eq(shm_ring_attach(&r, &ctl, mem, 100), -EINVAL);
	cr_expect_eq(shm_ring_attach(&r, &ctl, mem, 1u << 31), -EINVAL);
}

Test(shm_ring, records_in_order_across_the_end)
{
	uint8_t in[200], out[200];
	uint32_t kind, len;
	unsigned n = 0;

	/* Lengths that are not multiples of 8 walk the records around the
	 * ring many times, splitting headers and payloads at its end. */
	for (unsigned round = 0; round < 500; round++) {
		uint32_t l = (round * 37u) % (shm_ring_max_payload(SIZE) + 1);

		for (uint32_t i = 0; i < l; i++)
			in[i] = (uint8_t)(round + i);
		cr_assert_eq(shm_ring_put(&prod, round, in, l), 0, "round %u", round);
		cr_assert_eq(shm_ring_peek(&cons, &kind, &len), 0);
		cr_assert_eq(kind, round);
		cr_assert_eq(len, l);
		cr_assert_eq(shm_ring_take(&cons, out), 0);
		cr_assert_eq(memcmp(in, out, l), 0, "round %u", round);
		n++;
	}
	cr_expect_eq(shm_ring_peek(&cons, &kind, &len), -EAGAIN);
	cr_expect_eq(shm_ring_drained(&prod), 1);
	guards_intact();
}

Test(shm_ring, full_then_room_again)
{
	uint8_t buf[64] = { 0 };
	uint32_t kind, len;
	int n = 0;

	/* 64-byte payloads take 72 bytes: three fit in 256. */
	while (shm_ring_put(&prod, 1, buf, sizeof(buf)) == 0)
		n++;
	cr_assert_eq(n, 3);
	cr_expect_eq(shm_ring_room(&prod, sizeof(buf)), 0);
	cr_expect_eq(shm_ring_put(&prod, 1, buf, sizeof(buf)), -EAGAIN);
	cr_expect_eq(shm_ring_drained(&prod), 0);
	cr_assert_eq(shm_ring_peek(&cons, &kind, &len), 0);
	cr_assert_eq(shm_ring_take(&cons, buf), 0);
	cr_expect_eq(shm_ring_put(&prod, 1, buf, sizeof(buf)), 0);
	cr_expect_eq(shm_ring_put(&prod, 1, buf, shm_ring_max_payload(SIZE) + 1), -EMSGSIZE);
	guards_intact();
}

Test(shm_ring, take_without_peek)
{
	uint8_t buf[8];

	cr_expect_eq(shm_ring_take(&cons, buf), -EINVAL);
}

/* The producer's tail from a hostile peer. */
Test(shm_ring, hostile_tail)
{
	static const uint32_t bad[] = { SIZE + 8, 0xfffffff8u, 4, 13 };
	uint32_t kind, len;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setup();
		atomic_store(&ctl.tail, bad[i]);
		cr_expect_eq(shm_ring_peek(&cons, &kind, &len), -EPROTO, "tail %u", bad[i]);
		/* Once broken, always broken: even a sane tail is not read. */
		atomic_store(&ctl.tail, 0);
		cr_expect_eq(shm_ring_peek(&cons, &kind, &len), -EPROTO);
	}
	guards_intact();
}

/* A record header that claims more than the ring or than was produced. */
Test(shm_ring, hostile_length)
{
	static const uint32_t bad[] = { SIZE, 0xffffffffu, SIZE / 2, 200, 17 };
	uint8_t buf[SIZE];
	uint32_t kind, len;

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint32_t hdr[2] = { bad[i], 1 };

		setup();
		memcpy(mem + GUARD, hdr, sizeof(hdr));
		atomic_store(&ctl.tail, 16);	/* a header and 8 bytes */
		cr_expect_eq(shm_ring_peek(&cons, &kind, &len), -EPROTO, "length %u", bad[i]);
		cr_expect_eq(shm_ring_take(&cons, buf), -EPROTO);
	}
	guards_intact();
}

/* A length that was valid when peeked and changed before take(): the
 * copy uses the validated length. */
Test(shm_ring, length_changed_after_peek)
{
	uint8_t in[16] = "0123456789abcde", out[SIZE + 64];
	uint32_t kind, len;

	memset(out, 0x5a, sizeof(out));
	cr_assert_eq(shm_ring_put(&prod, 2, in, sizeof(in)), 0);
	cr_assert_eq(shm_ring_peek(&cons, &kind, &len), 0);
	((uint32_t *)(void *)(mem + GUARD))[0] = SIZE;
	cr_assert_eq(shm_ring_take(&cons, out), 0);
	cr_expect_eq(memcmp(out, in, sizeof(in)), 0);
	cr_expect_eq(out[sizeof(in)], 0x5a, "copied past the validated length");
	guards_intact();
}

/* The consumer's head from a hostile peer: ahead of our tail, or so far
 * behind that the ring would hold more than its size. */
Test(shm_ring, hostile_head)
{
	static const uint32_t bad[] = { 8, 0xfffffe00u, 3 };
	uint8_t buf[8] = { 0 };

	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setup();
		cr_assert_eq(shm_ring_put(&prod, 1, buf, sizeof(buf)), 0);
		atomic_store(&ctl.head, 16 + bad[i]);
		cr_expect_eq(shm_ring_put(&prod, 1, buf, sizeof(buf)), -EPROTO, "head %u", bad[i]);
		cr_expect_eq(shm_ring_room(&prod, 8), -EPROTO);
		cr_expect_eq(shm_ring_drained(&prod), -EPROTO);
	}
	guards_intact();
}

static uint32_t xorshift(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

/* A peer that writes whatever it likes, where it likes: the ring's bytes,
 * its tail (to a consumer) and its head (to a producer), at random, many
 * times over (a fixed seed: the same cases every run).  Whatever it does,
 * a record accepted lies within what the tail says was produced and
 * within the largest the ring carries, take() copies exactly its length,
 * a breach is final, and no byte outside the ring or past the copy is
 * touched. */
Test(shm_ring, random_hostile_peer)
{
	uint8_t out[SIZE + GUARD];
	uint32_t seed = 0x9e3779b9u;

	for (unsigned run = 0; run < 2000; run++) {
		uint32_t kind, len, start = 8u * (xorshift(&seed) % 64);
		bool consumer = run % 2;

		setup();
		/* Somewhere along the free-running counters. */
		cons.pos = prod.pos = start;
		atomic_store(&ctl.head, start);
		atomic_store(&ctl.tail, start);
		for (unsigned step = 0; step < 16; step++) {
			uint32_t r = xorshift(&seed);

			if (r % 4 == 0) {
				mem[GUARD + xorshift(&seed) % SIZE] = (uint8_t)xorshift(&seed);
			} else if (r % 4 == 1) {
				uint32_t hdr[2] = { xorshift(&seed) % (SIZE + 16), xorshift(&seed) % 3 };
				uint32_t at = (cons.pos + 8u * (xorshift(&seed) % 4)) & (SIZE - 1);

				memcpy(mem + GUARD + (at & ~7u), hdr,
				       (at & ~7u) + 8 <= SIZE ? 8 : 4);
			} else {
				/* Near the right value and aligned mostly,
				 * anything now and then. */
				uint32_t v = r % 8 == 7 ? xorshift(&seed)
					     : (consumer ? cons.pos : prod.pos) +
						       8u * (xorshift(&seed) % (4 * SIZE / 8 + 1)) -
						       2 * SIZE;

				atomic_store(consumer ? &ctl.tail : &ctl.head, v);
			}
			if (consumer) {
				uint32_t tail = atomic_load(&ctl.tail), avail = tail - cons.pos;
				int ret = shm_ring_peek(&cons, &kind, &len);

				if (ret == 0) {
					cr_assert(avail <= SIZE && !(tail & 7u), "accepted with tail %u", tail);
					cr_assert_leq(len, shm_ring_max_payload(SIZE));
					cr_assert_leq(shm_rec_bytes(len), avail);
					memset(out, 0x5a, sizeof(out));
					cr_assert_eq(shm_ring_take(&cons, out), 0);
					for (unsigned i = len; i < sizeof(out); i++)
						cr_assert_eq(out[i], 0x5a, "copied past %u bytes", len);
				} else if (ret == -EPROTO) {
					atomic_store(&ctl.tail, cons.pos);
					cr_assert_eq(shm_ring_peek(&cons, &kind, &len), -EPROTO);
					break;
				} else {
					cr_assert_eq(ret, -EAGAIN);
				}
			} else {
				uint8_t in[SIZE] = { 0 };
				uint32_t head = atomic_load(&ctl.head), used = prod.pos - head;
				int ret = shm_ring_put(&prod, 1, in, xorshift(&seed) % SIZE);

				cr_assert(ret == 0 || ret == -EAGAIN || ret == -EMSGSIZE || ret == -EPROTO,
					  "put gave %d", ret);
				if (ret == 0 || ret == -EAGAIN)
					cr_assert(used <= SIZE && !(head & 7u),
						  "head %u accepted at tail %u", head, prod.pos);
				if (ret == -EPROTO) {
					atomic_store(&ctl.head, prod.pos);
					cr_assert_eq(shm_ring_room(&prod, 8), -EPROTO);
					break;
				}
			}
			guards_intact();
		}
	}
}
