/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rss_exec OUTFILE PROGRAM [ARG]...: runs PROGRAM and writes its peak RSS
 * (KiB, wait4's ru_maxrss) to OUTFILE; exits with its status (128 + n for a
 * signal). A process's ru_maxrss includes what it had before exec -- all of
 * its forking parent's memory -- so test_hostile starts the loader through
 * this small program, whose own memory is all the loader inherits.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: rss_exec OUTFILE PROGRAM [ARG]...\n");
		return 64;
	}
	pid_t pid = fork();
	if (pid < 0)
		return 127;
	if (pid == 0) {
		execv(argv[2], argv + 2);
		_exit(127);
	}
	int status = 0;
	struct rusage ru;
	while (wait4(pid, &status, 0, &ru) < 0)
		if (errno != EINTR)
			return 127;
	FILE *f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%ld\n", ru.ru_maxrss) < 0 || fclose(f) != 0)
		return 127;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
