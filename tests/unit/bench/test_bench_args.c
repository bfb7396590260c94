/* test_bench_args.c: `cinfer bench` flag parsing: a table of bad command lines, each with
 * the words its error must contain, and the values good ones produce. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "bench/bench.h"

#define MAXA 16

static cinfer_status *parse(bench_config *c, const char *line, bool *help) {
  static char buf[1024];
  static char *argv[MAXA];
  snprintf(buf, sizeof buf, "bench %s", line);
  int argc = 0;
  for (char *t = strtok(buf, " "); t && argc < MAXA; t = strtok(NULL, " ")) argv[argc++] = t;
  bench_config_default(c);
  return bench_args_parse(c, argc, argv, help);
}

static const struct {
  const char *line, *want;
} bad[] = {
    {"--http-get /", "--url"},
    {"--url ftp://x --http-get /", "http://"},
    {"--url https://x:1 --http-get /", "https is not supported"},
    {"--url http://h:0 --http-get /", "port"},
    {"--url http://h:99999 --http-get /", "port"},
    {"--url http://h:80/v2 --http-get /", "path"},
    {"--url http://h:80", "no target"},
    {"--url http://h:80 --http-get / --http-post /", "one target"},
    {"--url http://h:80 --http-post /", "--body"},
    {"--url http://h:80 --http-get x", "must start with '/'"},
    {"--url http://h:80 --http-get / --concurrency 0", "--concurrency '0'"},
    {"--url http://h:80 --http-get / --concurrency 1,,2", "comma-separated"},
    {"--url http://h:80 --http-get / --concurrency abc", "not an integer"},
    {"--url http://h:80 --http-get / --rate -5", "--rate"},
    {"--url http://h:80 --http-get / --rate 10 --concurrency 2", "exclusive"},
    {"--url http://h:80 --http-get / --rate 10 --slo-p99 5", "choose one"},
    {"--url http://h:80 --http-get / --poisson", "open-loop"},
    {"--url http://h:80 --http-get / --window-ms 1", "--window-ms '1'"},
    {"--url http://h:80 --http-get / --max-windows 2", "between 3"},
    {"--url http://h:80 --http-get / --bogus", "unknown flag '--bogus'"},
    {"--url http://h:80 --http-get / stray", "unexpected argument 'stray'"},
    {"--url http://h:80 --http-get / --json", "--json needs a value"},
    {"--url http://h:80 --http-get / --binary", "KServe"},
    {"--url http://h:80 --http-get / --stream", "--openai"},
    {"--url http://h:80 --http-get / --quiet=1", "takes no value"},
    {"--url http://h:80 --openai chat", "--model"},
    {"--url http://h:80 --openai edits --model m", "chat or completions"},
    {"--url http://h:80 --model m --shape x", "NAME:D1"},
    {"--url http://h:80 --model m --shape x:", "no dimensions"},
    {"--url http://h:80 --model m --shape x:1,2,3,4,5,6,7,8,9", "8 dimensions"},
    {"--url http://h:80 --model m --stress 120 --requests 10", "--requests"},
    {"--url http://h:80 --model m --cost-per-hour x", "not a number"},
    {"--url http://h:80 --model m --stability 0", "--stability"},
    {"--url http://h:80 --model m --header NoColon", "Name: value"},
    {"--url http://h:80 --model a/b", "letters, digits"},
    {"--url http://h:80 --model m --model-version 1?x", "letters, digits"},
    {"--url http://h:80 --http-get /a\x01b", "control characters"},
    {"--url http://h:80 --model m --header :v", "Name: value"},
    {"--url http://h:80 --model m --header Bad\tName:v", "header name"},
};

static void test_bad(void **st) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    bench_config c;
    bool help;
    cinfer_status *s = parse(&c, bad[i].line, &help);
    if (!s) fail_msg("accepted: %s", bad[i].line);
    assert_int_equal(cinfer_status_code(s), CINFER_INVALID_ARG);
    if (!strstr(cinfer_status_message(s), bad[i].want))
      fail_msg("'%s': message '%s' lacks '%s'", bad[i].line, cinfer_status_message(s), bad[i].want);
    cinfer_status_free(s);
  }
}

static void test_good(void **st) {
  bench_config c;
  bool help;
  assert_null(parse(&c, "--url http://127.0.0.1:8000 --model resnet --model-version 2 --binary "
                        "--shape input:1,3,224,224 --concurrency 1,2,4 --window-ms=500 --json out.json",
                    &help));
  assert_false(help);
  assert_int_equal(c.target, BENCH_TARGET_KSERVE);
  assert_int_equal(c.load, BENCH_LOAD_CLOSED);
  assert_string_equal(c.host, "127.0.0.1");
  assert_string_equal(c.port, "8000");
  assert_string_equal(c.host_header, "127.0.0.1:8000");
  assert_string_equal(c.model_version, "2");
  assert_true(c.binary);
  assert_int_equal(c.n_shapes, 1);
  assert_string_equal(c.shapes[0].name, "input");
  assert_int_equal(c.shapes[0].ndim, 4);
  assert_int_equal(c.shapes[0].dims[3], 224);
  assert_int_equal(c.n_concurrency, 3);
  assert_int_equal(c.concurrency[2], 4);
  assert_int_equal(c.window_ms, 500);
  assert_string_equal(c.json_path, "out.json");

  assert_null(parse(&c, "--url http://[::1]:9 --http-post /x --body b.bin --rate 100,200.5 --poisson", &help));
  assert_int_equal(c.target, BENCH_TARGET_HTTP_POST);
  assert_int_equal(c.load, BENCH_LOAD_RATE);
  assert_string_equal(c.host, "::1");
  assert_string_equal(c.host_header, "[::1]:9");
  assert_int_equal(c.n_rates, 2);
  assert_true(c.rates[1] == 200.5);
  assert_true(c.poisson);

  assert_null(parse(&c, "--url http://h --openai chat --model llm --stream --max-tokens 64 --slo-p99 250 "
                        "--header Authorization:Bearer-x", &help));
  assert_int_equal(c.n_headers, 1);
  assert_string_equal(c.headers[0], "Authorization:Bearer-x");
  assert_int_equal(c.target, BENCH_TARGET_OPENAI);
  assert_true(c.openai_chat && c.stream);
  assert_int_equal(c.max_tokens, 64);
  assert_int_equal(c.load, BENCH_LOAD_SLO);
  assert_string_equal(c.port, "80");
  assert_int_equal(c.concurrency[0], 16); /* capacity probe default */

  assert_null(parse(&c, "--url http://h:1 --http-get / --stress 150 --concurrency 8", &help));
  assert_int_equal(c.load, BENCH_LOAD_STRESS);
  assert_true(c.stress_pct == 150);
  assert_int_equal(c.concurrency[0], 8);

  assert_null(parse(&c, "--bogus --help", &help));
  assert_true(help);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_bad), cmocka_unit_test(test_good)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
