/* gateway.c: `cinfer gateway`: the front door in front of `cinfer serve` replicas. Reads an
 * optional JSON config file, applies flags on top (flags win), validates, starts the
 * gateway, then waits for SIGTERM/SIGINT and drains (stop accepting, finish in-flight
 * requests within drain_timeout_ms) before exiting 0. Configuration errors exit 2 with a
 * message naming the key or flag. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/log.h"
#include "gateway/gateway.h"

static void gw_usage(FILE *f) {
  fprintf(f,
          "usage: cinfer gateway [--config FILE] [options]\n\n"
          "Routes KServe v2 (/v2/*) and OpenAI (/v1/*) requests to `cinfer serve` replicas:\n"
          "per-model routing, least-outstanding load balancing, health checks, outlier\n"
          "ejection, retries, rate limits, load shedding and canary splits. The JSON config\n"
          "format is described in docs/gateway.md; flags override the file.\n\n"
          "options:\n"
          "  --config FILE              JSON configuration file\n"
          "  --host ADDR                listen address (default 0.0.0.0)\n"
          "  --port N                   listen port (default 8080; 0 = ephemeral)\n"
          "  --grpc-port N              also serve gRPC (h2c; h2 by ALPN with --tls-cert) on N\n"
          "                             (default off; 0 = ephemeral)\n"
          "  --io-threads N             I/O threads (default 2)\n"
          "  --upstream HOST:PORT[,grpc=N]  a replica (repeatable), N its gRPC port\n"
          "  --upstream-grpc-port N     replicas' gRPC port when their entry names none\n"
          "  --dns NAME:PORT            a DNS name whose every A/AAAA record is a replica\n"
          "                             (repeatable; re-resolved every --dns-interval-ms)\n"
          "  --dns-interval-ms N        default 5000\n"
          "  --upstreams-file FILE      watched file, one 'host:port [group=G] [weight=N] [grpc=N]' a line\n"
          "  --balancer NAME            p2c (default) | round_robin | weighted | kv_aware\n"
          "                             (kv_aware: OpenAI routes by the replicas' LLM load from\n"
          "                             their /metrics and prompt-prefix affinity)\n"
          "  --health-interval-ms N     active check interval (default 2000)\n"
          "  --health-timeout-ms N      active check timeout (default 1000)\n"
          "  --rate R                   requests/s per key (API key header or X-Forwarded-For)\n"
          "  --burst B                  burst for --rate (default 0)\n"
          "  --nodelay                  admit the burst at once instead of delaying it\n"
          "  --max-concurrency N        global limit on requests in flight\n"
          "  --admin-token TOKEN        bearer token for /admin and the restricted API groups\n"
          "                             (default: admin disabled)\n"
          "  --keys-file FILE           API keys (id sha256 role models [rate=R]), reloaded on\n"
          "                             change; every proxied call then needs a key\n"
          "  --trusted-proxy CIDR       honour X-Forwarded-For from these peers (repeatable)\n"
          "  --tls-cert FILE            serve HTTPS with this certificate chain (PEM) ...\n"
          "  --tls-key FILE             ... and key; both reloaded when they change\n"
          "  --upstream-tls             connect to replicas over TLS (system CA store)\n"
          "  --upstream-tls-ca FILE     ... verifying them with this CA file\n"
          "  --upstream-tls-cert FILE   ... presenting this client certificate (mutual TLS)\n"
          "  --upstream-tls-key FILE    ... and its key\n"
          "  --seed N                   RNG seed (balancer choices, request ids)\n"
          "  --log-format text|json     log line format (default text)\n"
          "  --log-verbose N            1: a line per retry and per local error\n"
          "  --check-config             validate the configuration and exit\n"
          "  -h, --help                 this help\n");
}

static bool flag_double(const char *flag, const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || !*s || *end || !(v >= lo && v <= hi)) {
    fprintf(stderr, "cinfer gateway: %s: '%s' is not a number in [%g, %g]\n", flag, s, lo, hi);
    return false;
  }
  *out = v;
  return true;
}

static bool set_str(char **dst, const char *v) {
  char *s = strdup(v);
  if (!s) return false;
  free(*dst);
  *dst = s;
  return true;
}

int cmd_gateway(int argc, char **argv) {
  enum {
    O_CONFIG = 256, O_HOST, O_PORT, O_IO, O_UP, O_DNS, O_DNSI, O_FILE, O_BAL, O_HI, O_HT,
    O_RATE, O_BURST, O_NODELAY, O_MAXC, O_TOKEN, O_SEED, O_LOGF, O_LOGV, O_CHECK, O_KEYS, O_TPROXY, O_TCERT, O_TKEY, O_UTLS, O_UCA, O_UCERT, O_UKEY, O_GPORT, O_UGPORT
  };
  static const struct option opts[] = {
      {"config", required_argument, 0, O_CONFIG}, {"host", required_argument, 0, O_HOST},
      {"grpc-port", required_argument, 0, O_GPORT},
      {"upstream-grpc-port", required_argument, 0, O_UGPORT},
      {"port", required_argument, 0, O_PORT}, {"io-threads", required_argument, 0, O_IO},
      {"upstream", required_argument, 0, O_UP}, {"dns", required_argument, 0, O_DNS},
      {"dns-interval-ms", required_argument, 0, O_DNSI},
      {"upstreams-file", required_argument, 0, O_FILE}, {"balancer", required_argument, 0, O_BAL},
      {"health-interval-ms", required_argument, 0, O_HI},
      {"health-timeout-ms", required_argument, 0, O_HT}, {"rate", required_argument, 0, O_RATE},
      {"burst", required_argument, 0, O_BURST}, {"nodelay", no_argument, 0, O_NODELAY},
      {"max-concurrency", required_argument, 0, O_MAXC},
      {"admin-token", required_argument, 0, O_TOKEN}, {"seed", required_argument, 0, O_SEED},
      {"log-format", required_argument, 0, O_LOGF}, {"log-verbose", required_argument, 0, O_LOGV},
      {"check-config", no_argument, 0, O_CHECK}, {"keys-file", required_argument, 0, O_KEYS},
      {"trusted-proxy", required_argument, 0, O_TPROXY},
      {"tls-cert", required_argument, 0, O_TCERT}, {"tls-key", required_argument, 0, O_TKEY},
      {"upstream-tls", no_argument, 0, O_UTLS}, {"upstream-tls-ca", required_argument, 0, O_UCA},
      {"upstream-tls-cert", required_argument, 0, O_UCERT},
      {"upstream-tls-key", required_argument, 0, O_UKEY}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};

  /* First pass: the config file, so that flags apply on top whatever their order. */
  gw_config cfg;
  gw_config_defaults(&cfg);
  int rc = 2;
  const char *log_format = "text";
  long long verbose = 0, v;
  bool check_only = false;
  opterr = 0;
  optind = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *file = NULL;
    if (!strcmp(a, "--config") && i + 1 < argc) file = argv[++i];
    else if (!strncmp(a, "--config=", 9)) file = a + 9;
    if (file) {
      cinfer_status *st = gw_config_load_file(&cfg, file);
      if (st) {
        fprintf(stderr, "cinfer gateway: %s\n", cinfer_status_message(st));
        cinfer_status_free(st);
        goto out;
      }
    }
  }
  opterr = 1;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
      case O_CONFIG: break;
      case O_HOST: if (!set_str(&cfg.host, optarg)) goto oom; break;
      case O_PORT: if (!cli_parse_int("gateway", "--port", optarg, 0, 65535, &v)) goto out; cfg.port = (int)v; break;
      case O_GPORT: if (!cli_parse_int("gateway", "--grpc-port", optarg, 0, 65535, &v)) goto out; cfg.grpc_port = (int)v; break;
      case O_UGPORT: if (!cli_parse_int("gateway", "--upstream-grpc-port", optarg, 1, 65535, &v)) goto out; cfg.upstream_grpc_port = (int)v; break;
      case O_IO: if (!cli_parse_int("gateway", "--io-threads", optarg, 1, 64, &v)) goto out; cfg.io_threads = (int)v; break;
      case O_UP: {
        char host[256], addr[300];
        uint16_t port;
        long long gport = 0;
        snprintf(addr, sizeof addr, "%s", optarg);
        char *comma = strchr(addr, ',');
        if (comma) {
          *comma = 0;
          if (strncmp(comma + 1, "grpc=", 5)) {
            fprintf(stderr, "cinfer gateway: --upstream: '%s': after ',' expected grpc=PORT\n", optarg);
            goto out;
          }
          if (!cli_parse_int("gateway", "--upstream ...,grpc=", comma + 6, 1, 65535, &gport)) goto out;
        }
        if (!gw_parse_hostport(addr, host, sizeof host, &port)) {
          fprintf(stderr, "cinfer gateway: --upstream: '%s' is not host:port\n", optarg);
          goto out;
        }
        gw_static_upstream *n = realloc(cfg.statics, (cfg.n_statics + 1) * sizeof *n);
        if (!n) goto oom;
        cfg.statics = n;
        n[cfg.n_statics] = (gw_static_upstream){strdup(addr), NULL, 1, (int)gport};
        if (!n[cfg.n_statics++].address) goto oom;
        break;
      }
      case O_DNS: {
        char host[256];
        uint16_t port;
        if (!gw_parse_hostport(optarg, host, sizeof host, &port)) {
          fprintf(stderr, "cinfer gateway: --dns: '%s' is not name:port\n", optarg);
          goto out;
        }
        gw_dns_upstream *n = realloc(cfg.dns, (cfg.n_dns + 1) * sizeof *n);
        if (!n) goto oom;
        cfg.dns = n;
        n[cfg.n_dns] = (gw_dns_upstream){strdup(host), port, NULL, 1};
        if (!n[cfg.n_dns++].name) goto oom;
        break;
      }
      case O_DNSI: if (!cli_parse_int("gateway", "--dns-interval-ms", optarg, 100, 86400000, &v)) goto out; cfg.dns_interval_ms = (int)v; break;
      case O_FILE: if (!set_str(&cfg.upstreams_file, optarg)) goto oom; break;
      case O_BAL:
        if (!strcmp(optarg, "p2c")) cfg.balancer = GW_BAL_P2C;
        else if (!strcmp(optarg, "round_robin")) cfg.balancer = GW_BAL_ROUND_ROBIN;
        else if (!strcmp(optarg, "weighted")) cfg.balancer = GW_BAL_WEIGHTED;
        else if (!strcmp(optarg, "kv_aware")) cfg.balancer = GW_BAL_KV_AWARE;
        else {
          fprintf(stderr, "cinfer gateway: --balancer: '%s' is not p2c, round_robin, weighted or kv_aware\n", optarg);
          goto out;
        }
        break;
      case O_HI: if (!cli_parse_int("gateway", "--health-interval-ms", optarg, 10, 3600000, &v)) goto out; cfg.health_interval_ms = (int)v; break;
      case O_HT: if (!cli_parse_int("gateway", "--health-timeout-ms", optarg, 10, 3600000, &v)) goto out; cfg.health_timeout_ms = (int)v; break;
      case O_RATE: if (!flag_double("--rate", optarg, 0.001, 1e9, &cfg.rate)) goto out; break;
      case O_BURST: if (!flag_double("--burst", optarg, 0, 1e9, &cfg.burst)) goto out; break;
      case O_NODELAY: cfg.nodelay = true; break;
      case O_MAXC: if (!cli_parse_int("gateway", "--max-concurrency", optarg, 0, 100000000, &v)) goto out; cfg.max_concurrency = (int)v; break;
      case O_TOKEN: if (!set_str(&cfg.admin_token, optarg)) goto oom; break;
      case O_KEYS: if (!set_str(&cfg.keys_file, optarg)) goto oom; break;
      case O_TCERT: if (!set_str(&cfg.tls_cert, optarg)) goto oom; break;
      case O_TKEY: if (!set_str(&cfg.tls_key, optarg)) goto oom; break;
      case O_UTLS: cfg.upstream_tls = true; break;
      case O_UCA: cfg.upstream_tls = true; if (!set_str(&cfg.up_ca, optarg)) goto oom; break;
      case O_UCERT: cfg.upstream_tls = true; if (!set_str(&cfg.up_cert, optarg)) goto oom; break;
      case O_UKEY: cfg.upstream_tls = true; if (!set_str(&cfg.up_key, optarg)) goto oom; break;
      case O_TPROXY:
        if (!gw_config_add_trusted_proxy(&cfg, optarg)) {
          fprintf(stderr, "cinfer gateway: --trusted-proxy: '%s' is not an address or CIDR (e.g. 10.0.0.0/8)\n", optarg);
          goto out;
        }
        break;
      case O_SEED: if (!cli_parse_int("gateway", "--seed", optarg, 0, 2147483647, &v)) goto out; cfg.seed = (unsigned)v; break;
      case O_LOGF: log_format = optarg; break;
      case O_LOGV: if (!cli_parse_int("gateway", "--log-verbose", optarg, 0, 10, &verbose)) goto out; break;
      case O_CHECK: check_only = true; break;
      case 'h': gw_usage(stdout); rc = 0; goto out;
      default: fprintf(stderr, "Run 'cinfer gateway --help' for the options.\n"); goto out;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "cinfer gateway: unexpected argument '%s'\n", argv[optind]);
    goto out;
  }
  if (!log_configure(log_format, (int)verbose)) {
    fprintf(stderr, "cinfer gateway: --log-format: '%s' is not text or json\n", log_format);
    goto out;
  }
  cinfer_status *st = gw_config_validate(&cfg);
  if (st) {
    fprintf(stderr, "cinfer gateway: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    goto out;
  }
  if (check_only) {
    printf("configuration ok\n");
    rc = 0;
    goto out;
  }

  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  gateway *g = NULL;
  char host[256];
  snprintf(host, sizeof host, "%s", cfg.host);
  st = gateway_create(&cfg, &g);
  if (st) {
    fprintf(stderr, "cinfer gateway: %s\n", cinfer_status_message(st));
    cinfer_status_free(st);
    rc = 1;
    goto out;
  }
  {
    char portbuf[16], gportbuf[16];
    snprintf(portbuf, sizeof portbuf, "%u", gateway_port(g));
    snprintf(gportbuf, sizeof gportbuf, "%u", gateway_grpc_port(g));
    const char *kv[] = {"http_port", portbuf, gateway_grpc_port(g) ? "grpc_port" : NULL, gportbuf, NULL};
    log_event(LOG_INFO, kv, "cinfer gateway listening on %s", host);
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  LOG_I("received %s: draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  int forced = gateway_drain(g);
  gateway_destroy(g);
  LOG_I("cinfer gateway: stopped (%d connections forced closed)", forced);
  rc = 0;
out:
  gw_config_free(&cfg);
  return rc;
oom:
  fprintf(stderr, "cinfer gateway: out of memory\n");
  gw_config_free(&cfg);
  return 1;
}
