/* fuzz_config.c: libFuzzer target for the config file parser: any bytes must parse or fail
 * with a message, never crash, leak or read out of bounds.
 * Build and run for a minute from the top of a configured tree: tests/fuzz/fuzz_setting.sh
 * (it builds this target with app/config.c, base/setting.c, base/errbuf.c and engine/error.c). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "app/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    app_config c;
    char err[1024];
    config_init(&c);
    int r = config_parse(&c, "fuzz", (const char *)data, size, err, sizeof err);
    if (r != 0 && strncmp(err, "fuzz:", 5) != 0)
        __builtin_trap(); /* every parse error names the file and line */
    config_free(&c);
    return 0;
}
