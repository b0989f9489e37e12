/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What the unit tests share: their scratch directories.
 */
#ifndef SDP_TEST_UNIT_SCRATCH_DIR_H
#define SDP_TEST_UNIT_SCRATCH_DIR_H

/* Removes dir and the files in it (a scratch directory has no
 * subdirectories); nothing if dir cannot be opened. */
void ut_scratch_dir_remove(const char *dir);

#endif /* SDP_TEST_UNIT_SCRATCH_DIR_H */
