/* api_openapi — api/openapi.json, embedded in the binary at build time so
 * GET /v1/openapi.json serves exactly the file kept in the repository. */
#include "api.h"

__asm__(".section .rodata\n"
        ".global api_openapi_json\n"
        ".type api_openapi_json, @object\n"
        ".balign 16\n"
        "api_openapi_json:\n"
        ".incbin \"api/openapi.json\"\n"
        ".byte 0\n"
        ".size api_openapi_json, . - api_openapi_json\n"
        ".previous\n");
