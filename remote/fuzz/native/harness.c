// The executor's request decoders with coverage of their C, which Go's
// fuzzer does not see: inputs as ../fake.h's run_input reads them, served
// over the fake driver of ../fake.c. Built three ways
// (scripts/fuzz-executor.sh): with AFL++, each input in a fresh process
// forked once the fake driver is set up, so that what a sequence of
// requests (or a state loaded first) leads to is reproducible; with
// libFuzzer (FLEXGV_LIBFUZZER), every input in one process; plainly, a
// program that runs the files it is given, to reproduce a finding.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "fake.h"

#if defined(FLEXGV_LIBFUZZER)
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    fake_driver();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
    run_input(data, n);
    return 0;
}
#elif defined(__AFL_FUZZ_TESTCASE_LEN)
__AFL_FUZZ_INIT();

int main(void)
{
    fake_driver();
    __AFL_INIT();
    run_input(__AFL_FUZZ_TESTCASE_BUF, __AFL_FUZZ_TESTCASE_LEN);
    return 0;
}
#else
int main(int argc, char **argv)
{
    fake_driver();
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (!f) {
            perror(argv[i]);
            return 2;
        }
        static uint8_t buf[1 << 24];
        size_t n = fread(buf, 1, sizeof buf, f);
        fclose(f);
        run_input(buf, n);
    }
    return 0;
}
#endif
