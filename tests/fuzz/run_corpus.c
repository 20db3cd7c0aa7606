/*
 * run_corpus.c - a main() for the fuzz targets, so they build with gcc.
 *
 * Feeds every file named on the command line (directories are walked one
 * level deep) to LLVMFuzzerTestOneInput(), once each, like libFuzzer's
 * "run these inputs" mode. Link it with one target and the sources it needs;
 * README.md has the commands. Exits non-zero if a file cannot be read; a
 * target that finds a bug aborts (or ASan stops it) on the file it names.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int
run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		perror(path);
		return -1;
	}
	do {
		if (len == cap) {
			uint8_t *p;

			cap = cap ? 2 * cap : 4096;
			if ((p = realloc(buf, cap)) == NULL) {
				fclose(f);
				free(buf);
				fprintf(stderr, "%s: out of memory\n", path);
				return -1;
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		perror(path);
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	fprintf(stderr, "running %s (%zu bytes)\n", path, len);
	/* An exact-size copy, so ASan sees reads past the input's end. */
	uint8_t *exact = malloc(len ? len : 1);
	if (exact == NULL) {
		free(buf);
		return -1;
	}
	if (len)
		memcpy(exact, buf, len);
	free(buf);
	LLVMFuzzerTestOneInput(exact, len);
	free(exact);
	return 0;
}

static int
run_path(const char *path)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (stat(path, &st) < 0) {
		perror(path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path);
	if ((d = opendir(path)) == NULL) {
		perror(path);
		return -1;
	}
	while ((de = readdir(d)) != NULL) {
		char sub[4096];

		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
		if (stat(sub, &st) == 0 && S_ISREG(st.st_mode) && run_file(sub) < 0)
			rc = -1;
	}
	closedir(d);
	return rc;
}

int
main(int argc, char **argv)
{
	int rc = 0, n = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s file-or-dir...\n", argv[0]);
		return 2;
	}
	for (int i = 1; i < argc; i++, n++)
		if (run_path(argv[i]) < 0)
			rc = 1;
	fprintf(stderr, "done: %d argument(s), %s\n", n, rc ? "with errors" : "ok");
	return rc;
}
