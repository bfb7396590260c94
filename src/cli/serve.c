/* serve.c: `cinfer serve`: the inference server process. Parses flags (Triton's names
 * where Triton has the flag), creates the in-process server and its HTTP frontend, then
 * waits for SIGTERM/SIGINT and drains: not ready -> stop accepting -> finish in-flight
 * requests (bounded by --exit-timeout-secs) -> unload -> exit 0. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/llm_serving/llm_backend.h"
#include "cinfer/cinfer.h"
#include "cli/cli.h"
#include "core/buf.h"
#include "core/log.h"
#include "frontend/frontend.h"
#include "frontend/kserve.h"
#include "frontend/shm.h"
#include "grpc/grpc.h"
#include "streams/streams.h"

static void serve_usage(FILE *f) {
  fprintf(f,
          "usage: cinfer serve --model-repository DIR [options]\n\n"
          "Serves the models of a Triton-style model repository over the KServe v2 HTTP\n"
          "protocol, with Prometheus metrics at /metrics.\n\n"
          "options:\n"
          "  --model-repository DIR       model repository (required)\n"
          "  --backend-directory DIR      load a backend that is not built in, 'foo', from\n"
          "                               DIR/foo/libcinfer_foo.so (default: built-in only)\n"
          "  --host ADDR                  address to listen on (default 0.0.0.0)\n"
          "  --http-port N                HTTP port (default 8000)\n"
          "  --grpc-port N|off            KServe v2 gRPC port (default 8001; 0: any free\n"
          "                               port, as for --http-port; off: no gRPC)\n"
          "  --grpc-max-message-bytes N   largest gRPC request message (default: the\n"
          "                               --max-body-bytes value)\n"
          "  --metrics-port N             also serve /metrics on this port (default: only on\n"
          "                               the HTTP port)\n"
          "  --model-control-mode MODE    none | poll | explicit (default none)\n"
          "  --load-model NAME            with explicit: load NAME at start; repeatable; '*'\n"
          "                               loads every model\n"
          "  --repository-poll-secs N     with poll: rescan interval (default 15)\n"
          "  --threads N                  thread budget for the whole process (default: the\n"
          "                               number of CPUs)\n"
          "  --io-threads N               HTTP I/O threads taken from the budget (default:\n"
          "                               half the budget, 1 to 4)\n"
          "  --strict-readiness BOOL      ready only when every model is loaded (default true)\n"
          "  --exit-on-error BOOL         exit (status 1) when a model fails to load at start\n"
          "                               or a --load-model name is unknown (default false;\n"
          "                               Triton's default is true)\n"
          "  Triton's --http-thread-count N (= --io-threads), --allow-grpc false (= --grpc-port\n"
          "  off), --allow-http true, --allow-metrics true, --strict-model-config false are\n"
          "  accepted; their other values are refused, naming the flag.\n"
          "  --exit-timeout-secs N        grace period for in-flight requests on SIGTERM\n"
          "                               (default 30)\n"
          "  --max-body-bytes N           largest request body accepted (default 256 MiB)\n"
          "  --max-tensor-elements N      largest input tensor accepted (default 67108864)\n"
          "  --http-max-input-size N      Triton's limit on a decompressed body, the JSON\n"
          "                               header and each input's bytes (default 64 MiB)\n"
          "  --http-max-chunks N          most chunks of a chunked request body (default 65536)\n"
          "  --http-header-timeout-ms N   time to receive request headers (default 10000)\n"
          "  --http-body-timeout-ms N     longest stall while receiving a body (default 30000)\n"
          "  --http-idle-timeout-ms N     idle keep-alive connections close (default 60000)\n"
          "  --log-format FMT             log line format: text (= Triton's default or\n"
          "                               ISO8601) or json (default text)\n"
          "  --log-verbose N              1: one line per request (default 0)\n"
          "  --log-file FILE              write the log to FILE (appended) instead of stderr\n"
          "  --log-info BOOL, --log-warning BOOL, --log-error BOOL\n"
          "                               turn those lines on or off (default true; all three\n"
          "                               and the verbosity change live through /v2/logging)\n"
          "  --trace-config [triton,]SETTING=VALUE\n"
          "                               request tracing as Triton's: rate=N (1000), level=\n"
          "                               OFF|TIMESTAMPS|TENSORS (repeatable), count=N (-1),\n"
          "                               mode=triton, triton,file=PATH, triton,log-frequency=N\n"
          "  --tls-cert FILE              serve HTTPS on the HTTP port with this certificate\n"
          "                               chain (PEM) ...\n"
          "  --tls-key FILE               ... and key; both reloaded when they change\n"
          "  --http-restricted-api GROUPS:KEY=VALUE\n"
          "                               calls of these API groups (health, metadata,\n"
          "                               inference, shared-memory, model-config,\n"
          "                               model-repository, statistics, trace, logging) need\n"
          "                               header KEY: VALUE, else 403; repeatable (Triton's flag)\n"
          "  --http-header-forward-pattern RE, --grpc-header-forward-pattern RE\n"
          "                               request headers (gRPC: metadata) whose name RE\n"
          "                               matches become string parameters of inference\n"
          "                               requests (Triton's flags; case-insensitive unless RE\n"
          "                               starts with (?-i); POSIX extended syntax)\n"
          "  --grpc-restricted-protocol GROUPS:KEY=VALUE\n"
          "                               the same for gRPC calls (metadata KEY: VALUE, else\n"
          "                               PERMISSION_DENIED); repeatable (Triton's flag)\n"
          "  --grpc-use-ssl BOOL          TLS on the gRPC port (ALPN h2; default false) with\n"
          "  --grpc-server-cert FILE      ... this certificate chain (PEM) ...\n"
          "  --grpc-server-key FILE       ... and key; both reloaded when they change\n"
          "  --grpc-use-ssl-mutual BOOL   clients must present a certificate signed by\n"
          "  --grpc-root-cert FILE        ... this CA (PEM; only used for mutual TLS, as Triton)\n"
          "  --shared-memory-key-prefix P system shared-memory keys clients may register must\n"
          "                               start with P (default: any key)\n"
          "  --shared-memory-max-bytes N  largest region a client may register (default: any)\n"
          "  --kv-cache-memory SIZE       KV cache of each LLM model that does not set\n"
          "                               kv_cache_memory, kv_bytes or kv_blocks: bytes\n"
          "                               (2G, 512MiB, 1.5GB) or a fraction of the machine's\n"
          "                               memory (0.25 or 25%%) (default: max_seqs full\n"
          "                               contexts, at most 1 GiB)\n"
          "  --llm-max-waiting N          LLM admission: sequences waiting for the engine\n"
          "                               beyond which a request is refused at once (503,\n"
          "                               Retry-After) for models without max_waiting\n"
          "                               (default 4 x max_seqs; 0 = no limit)\n"
          "  --streams-page               serve the live video page at /streams: the latest\n"
          "                               annotated frame and fps of each stream that\n"
          "                               `cinfer streams --publish` pushes here\n"
          "                               (POST /streams/N; see docs/user-guide.md)\n"
          "  -h, --help                   this help\n");
}

/* --exit-on-error (Triton's flag): the models that failed to load at start (in explicit mode
 * those --load-model asked for), and the --load-model names the repository does not hold, as
 * one error; NULL when none. */
static cinfer_status *startup_errors(cinfer_server *s, bool explicit_mode, const char *const *load, size_t n_load) {
  cinfer_model_index_entry *idx = NULL;
  size_t n = 0;
  cinfer_status *st = cinfer_server_repository_index(s, false, &idx, &n);
  if (st) return st;
  cbuf b = {0};
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(idx[i].state, "UNAVAILABLE") || !idx[i].reason[0]) continue;
    bool wanted = !explicit_mode;
    for (size_t k = 0; !wanted && k < n_load; k++) wanted = !strcmp(load[k], "*") || !strcmp(load[k], idx[i].name);
    if (!wanted) continue;
    cbuf_printf(&b, "%s'%s': %s", bad++ ? "; " : "", idx[i].name, idx[i].reason);
  }
  for (size_t k = 0; k < n_load; k++) {
    bool known = !strcmp(load[k], "*");
    for (size_t i = 0; !known && i < n; i++) known = !strcmp(idx[i].name, load[k]);
    if (!known) cbuf_printf(&b, "%s--load-model '%s': no such model in the repository", bad++ ? "; " : "", load[k]);
  }
  cinfer_model_index_free(idx, n);
  st = bad ? cinfer_status_new(CINFER_INTERNAL, "%zu model(s) failed to load: %s", bad, b.data) : NULL;
  cbuf_free(&b);
  return st;
}

int cmd_serve(int argc, char **argv) {
  enum {
    O_REPO = 256, O_HOST, O_PORT, O_MPORT, O_MODE, O_LOAD, O_POLL, O_THREADS, O_IO,
    O_STRICT, O_EXIT, O_BODY, O_ELEMS, O_HTO, O_BTO, O_ITO, O_LOGF, O_LOGV, O_BACKEND_DIR, O_TCERT, O_TKEY, O_RAPI,
    O_LOGFILE, O_LOGINFO, O_LOGWARN, O_LOGERR, O_TRACE,
    O_MAXIN, O_MAXCHUNKS, O_GRPC, O_GRPC_MSG, O_GRPC_RP,
    O_GRPC_SSL, O_GRPC_CERT, O_GRPC_KEY, O_GRPC_ROOT, O_GRPC_MUTUAL, O_KVMEM, O_LLM_WAIT,
    O_SHM_PREFIX, O_SHM_MAX, O_ALLOW_GRPC, O_ALLOW_HTTP, O_ALLOW_METRICS, O_EXIT_ON_ERROR,
    O_STRICT_CONFIG, O_STREAMS_PAGE, O_HTTP_FWD, O_GRPC_FWD
  };
  static const struct option opts[] = {
      {"model-repository", required_argument, 0, O_REPO},
      {"model-store", required_argument, 0, O_REPO},
      {"backend-directory", required_argument, 0, O_BACKEND_DIR},
      {"host", required_argument, 0, O_HOST},
      {"http-port", required_argument, 0, O_PORT},
      {"metrics-port", required_argument, 0, O_MPORT},
      {"grpc-port", required_argument, 0, O_GRPC},
      {"grpc-max-message-bytes", required_argument, 0, O_GRPC_MSG},
      {"grpc-restricted-protocol", required_argument, 0, O_GRPC_RP},
      {"grpc-use-ssl", required_argument, 0, O_GRPC_SSL},
      {"grpc-server-cert", required_argument, 0, O_GRPC_CERT},
      {"grpc-server-key", required_argument, 0, O_GRPC_KEY},
      {"grpc-root-cert", required_argument, 0, O_GRPC_ROOT},
      {"shared-memory-key-prefix", required_argument, 0, O_SHM_PREFIX},
      {"shared-memory-max-bytes", required_argument, 0, O_SHM_MAX},
      {"streams-page", no_argument, 0, O_STREAMS_PAGE},
      {"grpc-use-ssl-mutual", required_argument, 0, O_GRPC_MUTUAL},
      {"model-control-mode", required_argument, 0, O_MODE},
      {"load-model", required_argument, 0, O_LOAD},
      {"repository-poll-secs", required_argument, 0, O_POLL},
      {"threads", required_argument, 0, O_THREADS},
      {"io-threads", required_argument, 0, O_IO},
      {"http-thread-count", required_argument, 0, O_IO}, /* Triton's name */
      {"http-header-forward-pattern", required_argument, 0, O_HTTP_FWD},
      {"grpc-header-forward-pattern", required_argument, 0, O_GRPC_FWD},
      {"allow-grpc", required_argument, 0, O_ALLOW_GRPC},
      {"allow-http", required_argument, 0, O_ALLOW_HTTP},
      {"allow-metrics", required_argument, 0, O_ALLOW_METRICS},
      {"exit-on-error", required_argument, 0, O_EXIT_ON_ERROR},
      {"strict-model-config", required_argument, 0, O_STRICT_CONFIG},
      {"strict-readiness", required_argument, 0, O_STRICT},
      {"exit-timeout-secs", required_argument, 0, O_EXIT},
      {"max-body-bytes", required_argument, 0, O_BODY},
      {"max-tensor-elements", required_argument, 0, O_ELEMS},
      {"http-header-timeout-ms", required_argument, 0, O_HTO},
      {"http-body-timeout-ms", required_argument, 0, O_BTO},
      {"http-idle-timeout-ms", required_argument, 0, O_ITO},
      {"log-format", required_argument, 0, O_LOGF},
      {"log-verbose", required_argument, 0, O_LOGV},
      {"tls-cert", required_argument, 0, O_TCERT},
      {"tls-key", required_argument, 0, O_TKEY},
      {"http-restricted-api", required_argument, 0, O_RAPI},
      {"log-file", required_argument, 0, O_LOGFILE},
      {"log-info", required_argument, 0, O_LOGINFO},
      {"log-warning", required_argument, 0, O_LOGWARN},
      {"log-error", required_argument, 0, O_LOGERR},
      {"trace-config", required_argument, 0, O_TRACE},
      {"http-max-input-size", required_argument, 0, O_MAXIN},
      {"http-max-chunks", required_argument, 0, O_MAXCHUNKS},
      {"kv-cache-memory", required_argument, 0, O_KVMEM},
      {"llm-max-waiting", required_argument, 0, O_LLM_WAIT},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  const char *repo = NULL, *backend_dir = NULL, *host = "0.0.0.0", *log_format = "text";
  long long grpc_port = 8001, grpc_msg = 0;
  long long port = 8000, mport = -1, poll = 15, threads = 0, io = 0, exit_to = 30;
  long long body = 256ll << 20, elems = 1ll << 26, hto = 10000, bto = 30000, ito = 60000, verbose = 0;
  long long maxin = 1ll << 26, maxchunks = 65536;
  bool strict = true, exit_on_error = false, allow_grpc = true;
  cinfer_model_control mode = CINFER_MODEL_CONTROL_NONE;
  const char **load = calloc((size_t)argc + 1, sizeof *load);
  const char **rapi = calloc((size_t)argc + 1, sizeof *rapi);
  const char **grp = calloc((size_t)argc + 1, sizeof *grp);
  const char *tls_cert = NULL, *tls_key = NULL, *http_fwd = NULL, *grpc_fwd = NULL;
  const char *gcert = NULL, *gkey = NULL, *groot = NULL, *shm_prefix = NULL;
  long long shm_max = 0;
  bool streams_page = false;
  bool gssl = false, gmutual = false;
  size_t n_load = 0, n_rapi = 0, n_grp = 0;
  const char *log_file = NULL;
  int log_on[3] = {1, 1, 1}; /* error, warning, info */
  cinfer_trace_setting trace = {.level = 0, .rate = 1000, .count = -1, .log_frequency = 0};
  bool trace_given = false;
  int c, rc = 2;
  optind = 1;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {


    switch (c) {
      case O_REPO: repo = optarg; break;
      case O_BACKEND_DIR: backend_dir = optarg; break;
      case O_HOST: host = optarg; break;
      case O_PORT: if (!cli_parse_int("serve", "--http-port", optarg, 0, 65535, &port)) goto out; break;
      case O_GRPC:
        if (!strcmp(optarg, "off")) grpc_port = -1;
        else if (!cli_parse_int("serve", "--grpc-port", optarg, 0, 65535, &grpc_port)) goto out;
        break;
      case O_GRPC_MSG:
        if (!cli_parse_int("serve", "--grpc-max-message-bytes", optarg, 1024, 4294967295ll, &grpc_msg)) goto out;
        break;
      case O_MPORT: if (!cli_parse_int("serve", "--metrics-port", optarg, 0, 65535, &mport)) goto out; break;
      case O_MODE:
        if (!strcmp(optarg, "none")) mode = CINFER_MODEL_CONTROL_NONE;
        else if (!strcmp(optarg, "poll")) mode = CINFER_MODEL_CONTROL_POLL;
        else if (!strcmp(optarg, "explicit")) mode = CINFER_MODEL_CONTROL_EXPLICIT;
        else {
          fprintf(stderr, "cinfer serve: --model-control-mode: '%s' is not none, poll or explicit\n", optarg);
          goto out;
        }
        break;
      case O_LOAD: load[n_load++] = optarg; break;
      case O_POLL: if (!cli_parse_int("serve", "--repository-poll-secs", optarg, 1, 86400, &poll)) goto out; break;
      case O_THREADS: if (!cli_parse_int("serve", "--threads", optarg, 1, 4096, &threads)) goto out; break;
      case O_IO: if (!cli_parse_int("serve", "--io-threads", optarg, 1, 256, &io)) goto out; break;
      case O_STRICT: if (!cli_parse_bool("serve", "--strict-readiness", optarg, &strict)) goto out; break;
      case O_ALLOW_GRPC: if (!cli_parse_bool("serve", "--allow-grpc", optarg, &allow_grpc)) goto out; break;
      case O_ALLOW_HTTP:
      case O_ALLOW_METRICS:
      case O_STRICT_CONFIG: {
        const char *flag = c == O_ALLOW_HTTP ? "--allow-http" : c == O_ALLOW_METRICS ? "--allow-metrics" : "--strict-model-config";
        bool v;
        if (!cli_parse_bool("serve", flag, optarg, &v)) goto out;
        if (c == O_STRICT_CONFIG ? v : !v) { /* Triton's flag, with a value cinfer does not implement */
          fprintf(stderr, "cinfer serve: %s=%s is not supported: %s\n", flag, optarg,
                  c == O_ALLOW_HTTP ? "cinfer always serves its HTTP port (KServe, OpenAI, /metrics)"
                  : c == O_ALLOW_METRICS ? "/metrics is always served on the HTTP port (--metrics-port adds one)"
                  : "configs are always auto-completed from the model file where they leave fields out");
          goto out;
        }
        break;
      }
      case O_HTTP_FWD:
      case O_GRPC_FWD: { /* checked here, before any model loads */
        kserve_fwd f;
        cinfer_status *fst = kserve_fwd_init(&f, c == O_HTTP_FWD ? "--http-header-forward-pattern"
                                                                 : "--grpc-header-forward-pattern", optarg);
        kserve_fwd_free(&f);
        if (fst) {
          fprintf(stderr, "cinfer serve: %s\n", cinfer_status_message(fst));
          cinfer_status_free(fst);
          goto out;
        }
        if (c == O_HTTP_FWD) http_fwd = optarg;
        else grpc_fwd = optarg;
        break;
      }
      case O_EXIT_ON_ERROR: if (!cli_parse_bool("serve", "--exit-on-error", optarg, &exit_on_error)) goto out; break;
      case O_EXIT: if (!cli_parse_int("serve", "--exit-timeout-secs", optarg, 0, 3600, &exit_to)) goto out; break;
      case O_BODY: if (!cli_parse_int("serve", "--max-body-bytes", optarg, 1024, 1ll << 40, &body)) goto out; break;
      case O_ELEMS: if (!cli_parse_int("serve", "--max-tensor-elements", optarg, 1, 1ll << 40, &elems)) goto out; break;
      case O_HTO: if (!cli_parse_int("serve", "--http-header-timeout-ms", optarg, 1, 3600000, &hto)) goto out; break;
      case O_BTO: if (!cli_parse_int("serve", "--http-body-timeout-ms", optarg, 1, 3600000, &bto)) goto out; break;
      case O_ITO: if (!cli_parse_int("serve", "--http-idle-timeout-ms", optarg, 1, 86400000, &ito)) goto out; break;
      case O_LOGF: log_format = optarg; break;
      case O_LOGV: if (!cli_parse_int("serve", "--log-verbose", optarg, 0, 10, &verbose)) goto out; break;
      case O_TCERT: tls_cert = optarg; break;
      case O_TKEY: tls_key = optarg; break;
      case O_RAPI: rapi[n_rapi++] = optarg; break;
      case O_GRPC_RP: grp[n_grp++] = optarg; break;
      case O_GRPC_SSL: if (!cli_parse_bool("serve", "--grpc-use-ssl", optarg, &gssl)) goto out; break;
      case O_GRPC_MUTUAL: if (!cli_parse_bool("serve", "--grpc-use-ssl-mutual", optarg, &gmutual)) goto out; break;
      case O_GRPC_CERT: gcert = optarg; break;
      case O_GRPC_KEY: gkey = optarg; break;
      case O_GRPC_ROOT: groot = optarg; break;
      case O_SHM_PREFIX: shm_prefix = optarg; break;
      case O_STREAMS_PAGE: streams_page = true; break;
      case O_SHM_MAX:
        if (!cli_parse_int("serve", "--shared-memory-max-bytes", optarg, 1, 1ll << 50, &shm_max)) goto out;
        break;
      case O_LOGFILE: log_file = optarg; break;
      case O_LOGINFO:
      case O_LOGWARN:
      case O_LOGERR: {
        int which = c == O_LOGERR ? 0 : c == O_LOGWARN ? 1 : 2;
        bool v;
        if (!cli_parse_bool("serve", which == 0 ? "--log-error" : which == 1 ? "--log-warning" : "--log-info", optarg, &v))
          goto out;
        log_on[which] = v;
        break;
      }
      case O_TRACE: {
        char err[1300];
        if (!cli_trace_config(optarg, &trace, err, sizeof err)) {
          fprintf(stderr, "cinfer serve: %s\n", err);
          goto out;
        }
        trace_given = true;
        break;
      }
      case O_MAXIN: if (!cli_parse_int("serve", "--http-max-input-size", optarg, 1, 1ll << 40, &maxin)) goto out; break;
      case O_MAXCHUNKS: if (!cli_parse_int("serve", "--http-max-chunks", optarg, 1, 1ll << 32, &maxchunks)) goto out; break;
      case O_KVMEM:
      case O_LLM_WAIT: {
        cinfer_status *lst = cinfer_llm_set_default(c == O_KVMEM ? "kv_cache_memory" : "max_waiting", optarg,
                                                    c == O_KVMEM ? "--kv-cache-memory" : "--llm-max-waiting");
        if (lst) {
          fprintf(stderr, "cinfer serve: %s\n", cinfer_status_message(lst));
          cinfer_status_free(lst);
          goto out;
        }
        break;
      }
      case 'h': serve_usage(stdout); rc = 0; goto out;
      default: fprintf(stderr, "Run 'cinfer serve --help' for the options.\n"); goto out;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "cinfer serve: unexpected argument '%s'\n", argv[optind]);
    goto out;
  }
  if (!repo) {
    fprintf(stderr, "cinfer serve: --model-repository is required\n");
    goto out;
  }
  if (!log_configure("text", (int)verbose) || !log_set_format(log_format)) {
    fprintf(stderr, "cinfer serve: --log-format: '%s' is not text, json, default or ISO8601\n", log_format);
    goto out;
  }
  if (log_file && !log_set_file(log_file)) {
    fprintf(stderr, "cinfer serve: --log-file '%s': %s\n", log_file, strerror(errno));
    goto out;
  }
  for (int i = 0; i < 3; i++) log_enable((log_level)i, log_on[i] != 0);
  if (trace_given && trace.level && !trace.file[0]) {
    fprintf(stderr, "cinfer serve: --trace-config: level %s needs triton,file=PATH\n",
            trace.level & CINFER_TRACE_TIMESTAMPS ? "TIMESTAMPS" : "TENSORS");
    goto out;
  }
  /* Triton: --grpc-use-ssl-mutual implies --grpc-use-ssl. */
  if (gmutual) gssl = true;
  if (!gssl && (gcert || gkey || groot)) {
    fprintf(stderr, "cinfer serve: --grpc-server-cert/--grpc-server-key/--grpc-root-cert need "
            "--grpc-use-ssl true\n");
    goto out;
  }
  if (gssl && (!gcert || !gkey)) {
    fprintf(stderr, "cinfer serve: --grpc-use-ssl needs --grpc-server-cert and --grpc-server-key\n");
    goto out;
  }
  if (gmutual && !groot) {
    fprintf(stderr, "cinfer serve: --grpc-use-ssl-mutual needs --grpc-root-cert (the CA that "
            "signs client certificates)\n");
    goto out;
  }
  if (!allow_grpc) grpc_port = -1; /* whatever order --grpc-port came in */
  if (grpc_port < 0 && (gssl || n_grp)) {
    fprintf(stderr, "cinfer serve: --grpc-use-ssl and --grpc-restricted-protocol need the gRPC "
            "endpoint (--grpc-port is off)\n");
    goto out;
  }
  if (n_load && mode != CINFER_MODEL_CONTROL_EXPLICIT) {
    fprintf(stderr, "cinfer serve: --load-model needs --model-control-mode explicit\n");
    goto out;
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (!threads) threads = ncpu > 0 ? ncpu : 1;
  if (!io) io = threads / 2 < 1 ? 1 : threads / 2 > 4 ? 4 : threads / 2;

  /* Signals are handled by this thread only: block them before any thread starts. */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN);

  rc = 1;
  cinfer_server_options so = {.model_repository = repo, .control_mode = mode,
                              .startup_models = load, .n_startup_models = n_load,
                              .repository_poll_secs = (int)poll, .threads = (int)threads,
                              .io_threads = 0, .strict_readiness = strict,
                              .backend_directory = backend_dir};
  cinfer_server *s = NULL;
  cinfer_status *st = cinfer_server_create(&so, &s);
  if (st) {
    LOG_E("cinfer serve: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    goto out;
  }
  if (exit_on_error && (st = startup_errors(s, mode == CINFER_MODEL_CONTROL_EXPLICIT, load, n_load))) {
    LOG_E("cinfer serve: --exit-on-error: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    cinfer_server_destroy(s);
    goto out;
  }
  if (trace_given && (st = cinfer_server_trace_init(s, &trace))) {
    LOG_E("cinfer serve: --trace-config: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    cinfer_server_destroy(s);
    goto out;
  }
  /* One shared-memory registry for both endpoints: a region registered over HTTP is usable
   * over gRPC and the reverse (Triton has one SharedMemoryManager). */
  shm_registry *shm = NULL;
  if ((st = shm_registry_create(&shm)) || (st = shm_registry_set_policy(shm, shm_prefix, (uint64_t)shm_max))) {
    shm_registry_destroy(shm);
    LOG_E("cinfer serve: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    cinfer_server_destroy(s);
    goto out;
  }
  frontend_opts fo = {.shm = shm, .host = host, .http_port = (uint16_t)port, .metrics_port = (int)mport,
                      .io_threads = (int)io, .max_body_bytes = (size_t)body,
                      .max_tensor_elements = elems, .header_timeout_ms = (int)hto,
                      .body_timeout_ms = (int)bto, .idle_timeout_ms = (int)ito,
                      .tls_cert = tls_cert, .tls_key = tls_key,
                      .restricted_api = rapi, .n_restricted_api = n_rapi, .header_forward_pattern = http_fwd,
                      .max_input_bytes = (size_t)maxin, .max_body_chunks = (size_t)maxchunks};
  /* --streams-page: the live board of src/streams on the HTTP port (one page for both
   * tools: cinfer streams --http-port serves the same board itself) */
  streams_live *board = NULL;
  if (streams_page && (st = streams_live_create(STREAMS_MAX, true, &board))) {
    LOG_E("cinfer serve: --streams-page: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    cinfer_server_destroy(s);
    shm_registry_destroy(shm);
    goto out;
  }
  fo.extra_route = board ? streams_live_route : NULL;
  fo.extra_route_user = board;
  frontend *fe = NULL;
  if ((st = frontend_start(s, &fo, &fe))) {
    LOG_E("cinfer serve: %s", cinfer_status_message(st));
    cinfer_status_free(st);
    cinfer_server_destroy(s);
    shm_registry_destroy(shm);
    streams_live_stop(board);
    goto out;
  }
  grpc_server *gs = NULL;
  if (grpc_port >= 0) {
    grpc_opts go = {.host = host, .port = (uint16_t)grpc_port, .io_threads = (int)io,
                    .max_message_bytes = (size_t)(grpc_msg ? grpc_msg : body),
                    .max_tensor_elements = elems, .shm = shm,
                    .restricted = grp, .n_restricted = n_grp, .header_forward_pattern = grpc_fwd,
                    .tls_cert = gcert, .tls_key = gkey, .tls_ca = gmutual ? groot : NULL};
    if ((st = grpc_server_start(s, &go, &gs))) {
      LOG_E("cinfer serve: gRPC port %lld: %s", grpc_port, cinfer_status_message(st));
      cinfer_status_free(st);
      frontend_shutdown(fe, 0);
      frontend_destroy(fe);
      cinfer_server_destroy(s);
      shm_registry_destroy(shm);
      streams_live_stop(board);
      goto out;
    }
  }
  {
    char portbuf[16], mbuf[16], tbuf[16], gbuf[16];
    snprintf(portbuf, sizeof portbuf, "%u", frontend_http_port(fe));
    snprintf(mbuf, sizeof mbuf, "%u", frontend_metrics_port(fe));
    snprintf(tbuf, sizeof tbuf, "%lld", threads);
    snprintf(gbuf, sizeof gbuf, "%u", gs ? grpc_server_port(gs) : 0);
    const char *kv[] = {"http_port", portbuf, "grpc_port", gbuf, "metrics_port", mbuf, "threads", tbuf, NULL};
    log_event(LOG_INFO, kv, "cinfer serve listening on %s", host);
  }
  int sig = 0;
  sigwait(&sigs, &sig);
  LOG_I("received %s: draining (up to %lld s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", exit_to);
  cinfer_server_begin_shutdown(s);
  grpc_server_shutdown(gs, (int)exit_to * 1000);
  frontend_shutdown(fe, (int)exit_to * 1000);
  grpc_server_destroy(gs);
  frontend_destroy(fe);
  cinfer_server_destroy(s);
  shm_registry_destroy(shm); /* after both endpoints: their requests hold regions */
  streams_live_stop(board);  /* after the frontend: its exchanges read the board */
  LOG_I("cinfer serve: stopped");
  rc = 0;
out:
  free(load);
  free(rapi);
  free(grp);
  return rc;
}
