/* proto/json_schema_fmt.c — the string formats the output grammar enforces: date, time,
 * date-time, uuid, ipv4, email, hostname (JSON Schema 2020-12's names; OpenAI's Structured
 * Outputs list these among theirs). Each grammar is narrower than the format where the format is
 * loose and a narrower text costs nothing: a date's day is at most 28 in February (leap years or
 * not), a time carries seconds and a zone ("Z" or +hh:mm), an e-mail's local part is letters,
 * digits, '.', '_', '+', '-'; every text it accepts is one Ajv's ajv-formats accepts. */
#include "proto/json_schema_int.h"
#include <string.h>

#define DAY28 "( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )"
#define DATE                                                                                       \
    "[0-9]{4} \"-\" ( \"02-\" " DAY28 " | ( \"0\" [469] | \"11\" ) \"-\" ( " DAY28                 \
    " | \"29\" | \"30\" ) | ( \"0\" [13578] | \"1\" [02] ) \"-\" ( " DAY28                         \
    " | \"29\" | \"30\" | \"31\" ) )"
#define HOUR "( [01] [0-9] | \"2\" [0-3] )"
#define TIME                                                                                       \
    HOUR " \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? ( \"Z\" | [-+] " HOUR         \
         " \":\" [0-5] [0-9] )"
#define LABEL "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,61} [a-zA-Z0-9] )?"
#define OCTET "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9] )"
#define LOCAL "[a-zA-Z0-9_+-]{1,32}"

static const struct {
    const char *name, *gbnf;
} formats[] = {
    {"date", DATE},
    {"time", TIME},
    {"date-time", DATE " \"T\" " TIME},
    {"uuid",
     "[0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}"},
    {"ipv4", OCTET " ( \".\" " OCTET " ){3}"},
    {"email", LOCAL " ( \".\" " LOCAL " ){0,3} \"@\" ( " LABEL " \".\" ){1,3} [a-zA-Z]{2,12}"},
    /* three labels of at most 63: within the format's 253 characters */
    {"hostname", LABEL " ( \".\" " LABEL " ){0,2}"},
};

int jsc_format(jsc *c, const char *name, proto_buf *b, const char *ptr)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (!strcmp(name, formats[i].name))
            return proto_buf_printf(b, "( \"\\\"\" %s \"\\\"\" )", formats[i].gbnf)
                       ? jsc_fail(c, ptr, "out of memory")
                       : 0;
    return 1;
}
