/* SPDX-License-Identifier: Apache-2.0 */
/* Source of the ELF seeds of tests/fuzz/corpus/elf (see make_seeds.py). */
#include <stdio.h>

static volatile int tiny_sink;

__attribute__((noinline)) int tiny_leaf(int x)
{
	tiny_sink = x;
	return tiny_sink * 2;
}

__attribute__((noinline)) int tiny_mid(int x)
{
	int a[16];
	for (int i = 0; i < 16; i++)
		a[i] = tiny_leaf(x + i);
	return a[x & 15];
}

int main(int argc, char **argv)
{
	(void)argv;
	printf("%d\n", tiny_mid(argc));
	return 0;
}
