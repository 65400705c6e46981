/* The libFuzzer entry point every harness in tests/fuzz defines. Built with
 * clang's -fsanitize=fuzzer it is driven by libFuzzer; built with driver.c it
 * replays a corpus as an ordinary test. */
#ifndef HS_FUZZ_H
#define HS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
