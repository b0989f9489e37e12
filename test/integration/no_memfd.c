/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * no_memfd PROGRAM ARGS...: runs PROGRAM with memfd_create(2) failing
 * with EMFILE (a seccomp filter, inherited across exec), as a sandbox
 * that forbids it or a process out of descriptors would see it: the shm
 * transport cannot make its rings and must leave the connection to the
 * next transport (shm_select.sh).
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NO_MEMFD_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NO_MEMFD_ARCH AUDIT_ARCH_AARCH64
#endif

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: no_memfd PROGRAM ARGS...\n");
		return 2;
	}
#ifdef NO_MEMFD_ARCH
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NO_MEMFD_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_memfd_create, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EMFILE & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
		perror("no_memfd: seccomp");
		return 77;
	}
	execvp(argv[1], argv + 1);
	perror("no_memfd: exec");
	return 127;
#else
	fprintf(stderr, "no_memfd: no seccomp filter for this architecture\n");
	return 77;
#endif
}
