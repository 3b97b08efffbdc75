/* setting.h: the one parser of the numbers and choices glmchat is given (flags, config keys,
 * GLMCHAT_* variables, slash commands); each error names the setting and the bad value. */
#ifndef GLMCHAT_BASE_SETTING_H
#define GLMCHAT_BASE_SETTING_H

#include <stddef.h>
#include <stdint.h>

/* A base-10 whole number in lo..hi (an optional sign, then digits; nothing else, no blanks).
 * 0 and *out set, or -1 with "'NAME' takes a whole number from LO to HI, not 'TEXT'" in err
 * (when err is not NULL); *out is unchanged on an error. */
int setting_int(const char *name, const char *text, long long lo, long long hi, long long *out,
                char *err, size_t errlen);

/* The same for 0..UINT64_MAX (digits only), e.g. seeds. */
int setting_u64(const char *name, const char *text, uint64_t *out, char *err, size_t errlen);

/* One of choices, '|'-separated ("fp8|bf16|f32"): 0 and its index in *out, or -1 with
 * "'NAME' takes fp8, bf16 or f32, not 'TEXT'" in err. */
int setting_choice(const char *name, const char *text, const char *choices, int *out, char *err,
                   size_t errlen);

/* A switch: on, yes, true or 1 give 1; off, no, false or 0 give 0 (nothing else, exactly so).
 * 0 and *out set, or -1 with "'NAME' takes on or off, not 'TEXT'" in err. */
int setting_bool(const char *name, const char *text, int *out, char *err, size_t errlen);

/* A finite decimal number in lo..hi: strtod's forms (leading blanks too), the whole text.
 * 0 and *out set, or -1 with "'NAME' takes a number from LO to HI, not 'TEXT'" in err. */
int setting_double(const char *name, const char *text, double lo, double hi, double *out, char *err,
                   size_t errlen);

/* "fp8, bf16 or f32" for "fp8|bf16|f32", into buf (always terminated). */
void setting_describe_choices(const char *choices, char *buf, size_t n);

#endif
