/* Unit test of HEAPSTORE_URL's grammar (collector/hs_config.h): one
 * address or a list of them, each as hs_config_parse_url splits it, and
 * what hs_config_load makes of a good and a malformed list (a malformed
 * one turns recording off, said in one line on stderr). The sender's use
 * of a list (spread, failover) is test_collector_failover's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hs_config.h"
#include "hs_error.h"

static hs_config cfg; /* static: load() asserts it is zero-filled */

/* A list of HS_CONFIG_ADDRS + extra addresses h0:1,h1:2,... */
static const char *many(int extra)
{
    static char buf[1024];
    size_t n = 0;
    for (int i = 0; i < HS_CONFIG_ADDRS + extra; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%sh%d:%d", i ? "," : "", i, i + 1);
    return buf;
}

static void test_grammar(void **state)
{
    (void)state;
    static const struct {
        const char *url;
        int rc, naddr;
        const char *host0, *port0, *hostn, *portn; /* the first and the last address */
    } cases[] = {
        {"tcp://127.0.0.1:7459", 0, 1, "127.0.0.1", "7459", "127.0.0.1", "7459"},
        {"h:1", 0, 1, "h", "1", "h", "1"},
        {"http://[::1]:80/ignored", 0, 1, "::1", "80", "::1", "80"},
        {"tcp://10.0.0.1:7300,tcp://10.0.0.2:7300", 0, 2, "10.0.0.1", "7300", "10.0.0.2", "7300"},
        {"h1:7300,h2:7301", 0, 2, "h1", "7300", "h2", "7301"},
        {"h1:1, http://h2:2/x ,\t[::1]:3", 0, 3, "h1", "1", "::1", "3"},
        {"a:1,a:1", 0, 2, "a", "1", "a", "1"}, /* twice: twice the share */
        {"", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,", HS_EINVAL, 0, 0, 0, 0, 0},
        {",h1:1", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,,h2:2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1, ,h2:2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,h2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,h2:0", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,h2:65536", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,h2:7x", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,:2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,[]:2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,ftp://h2:2", HS_EINVAL, 0, 0, 0, 0, 0},
        {"h1:1,file:///tmp/x.hsp", HS_EINVAL, 0, 0, 0, 0, 0},
        {"file:///tmp/x.hsp,h1:1", 0, -1, 0, 0, 0, 0}, /* a file path may hold commas */
        {"file://relative", HS_EINVAL, 0, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        memset(&cfg, 0, sizeof cfg);
        int rc = hs_config_parse_url(&cfg, cases[i].url);
        if (rc != cases[i].rc) fprintf(stderr, "'%s': %d\n", cases[i].url, rc);
        assert_int_equal(rc, cases[i].rc);
        if (rc) continue;
        if (cases[i].naddr < 0) {
            assert_int_equal(cfg.target, HS_TARGET_FILE);
            assert_string_equal(cfg.path, cases[i].url + 7);
            continue;
        }
        assert_int_equal(cfg.target, HS_TARGET_TCP);
        assert_int_equal(cfg.naddr, cases[i].naddr);
        assert_string_equal(cfg.addr[0].host, cases[i].host0);
        assert_string_equal(cfg.addr[0].port, cases[i].port0);
        assert_string_equal(cfg.addr[cfg.naddr - 1].host, cases[i].hostn);
        assert_string_equal(cfg.addr[cfg.naddr - 1].port, cases[i].portn);
    }
    /* at most HS_CONFIG_ADDRS addresses */
    memset(&cfg, 0, sizeof cfg);
    assert_int_equal(hs_config_parse_url(&cfg, many(0)), 0);
    assert_int_equal(cfg.naddr, HS_CONFIG_ADDRS);
    assert_string_equal(cfg.addr[HS_CONFIG_ADDRS - 1].host, "h15");
    assert_string_equal(cfg.addr[HS_CONFIG_ADDRS - 1].port, "16");
    memset(&cfg, 0, sizeof cfg);
    assert_int_equal(hs_config_parse_url(&cfg, many(1)), HS_EINVAL);
}

/* hs_config_load with HEAPSTORE_URL=url: what it wrote on stderr. */
static char *load(const char *url)
{
    char path[] = "/tmp/hs_test_url.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    int saved = dup(2);
    dup2(fd, 2);
    memset(&cfg, 0, sizeof cfg);
    setenv("HEAPSTORE_URL", url, 1);
    hs_config_load(&cfg);
    dup2(saved, 2);
    close(saved);
    static char out[2048];
    ssize_t n = pread(fd, out, sizeof out - 1, 0);
    out[n > 0 ? n : 0] = 0;
    close(fd);
    return out;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void test_load(void **state)
{
    (void)state;
    unsetenv("HEAPSTORE_DISABLE");
    const char *said = load("tcp://127.0.0.1:7300, 127.0.0.1:7301");
    assert_string_equal(said, "");
    assert_int_equal(cfg.disabled, 0);
    assert_int_equal(cfg.naddr, 2);
    assert_string_equal(cfg.url, "tcp://127.0.0.1:7300, 127.0.0.1:7301");

    said = load("127.0.0.1:7300,,127.0.0.1:7301");
    assert_int_equal(cfg.disabled, 1);
    assert_int_equal(lines(said), 1);
    assert_non_null(strstr(said, "heapstore: HEAPSTORE_URL='127.0.0.1:7300,,127.0.0.1:7301' is "
                                 "not a list of at most 16 addresses"));
    assert_non_null(strstr(said, "recording is off"));

    said = load(many(1));
    assert_int_equal(cfg.disabled, 1);
    assert_int_equal(lines(said), 1);
    assert_non_null(strstr(said, "at most 16 addresses"));

    said = load("ftp://h:1"); /* a single address keeps its sentence */
    assert_int_equal(cfg.disabled, 1);
    assert_int_equal(lines(said), 1);
    assert_non_null(strstr(said, "is not tcp://HOST:PORT"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar),
        cmocka_unit_test(test_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
