/* check_main.h: how every Check suite of glmchat runs (one runner, normal output, the exit status
 * says whether a test failed), so a test's main() is just its suite. */
#ifndef GLMCHAT_TESTS_COMMON_CHECK_MAIN_H
#define GLMCHAT_TESTS_COMMON_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs suite s (and frees it); EXIT_SUCCESS when every test passed, else EXIT_FAILURE. */
static inline int test_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
