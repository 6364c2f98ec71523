/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stb-bench-noop: a statically linked program that does nothing. Started every
 * interval by bench/macro_echo.sh (configuration 7), it measures what starting
 * any process that often costs the client beside it: the floor under the cost
 * of a stb-bpf-loader started as often.
 */
int main(void)
{
	return 0;
}
