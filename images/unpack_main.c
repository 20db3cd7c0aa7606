/*
 * unpack_main.c - sandq-unpack, the unpacker's program: started by
 * unpack.c (fork, then at once execve) for one layer, with the layer on
 * descriptor 3, the verdict's pipe on 4 and its job (struct unpack_job)
 * on 5. Not a command for people: anything else is refused.
 */
#include <stdio.h>
#include <unistd.h>

#include "../common/util.h"
#include "unpack_int.h"

int
main(int argc, char **argv)
{
	struct unpack_job j;
	ssize_t n;

	(void)argv;
	if (argc != 1 || (n = read(UNPACK_FD_JOB, &j, sizeof(j))) != (ssize_t)sizeof(j)) {
		fprintf(stderr, "sandq-unpack: started by sandq's image cache only\n");
		return 2;
	}
	close(UNPACK_FD_JOB);
	j.fd = UNPACK_FD_LAYER;
	j.pipe = UNPACK_FD_VERDICT;
	j.what[sizeof(j.what) - 1] = '\0';
	j.parent[sizeof(j.parent) - 1] = '\0';
	j.base[sizeof(j.base) - 1] = '\0';
	j.tmp[sizeof(j.tmp) - 1] = '\0';
	unpack__child_main(&j);
}
