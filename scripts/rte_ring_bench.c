/* SPDX-License-Identifier: MIT OR Apache-2.0
 *
 * rte_ring_bench — SPSC throughput baseline for shmnet, using DPDK's rte_ring.
 *
 * One producer thread and one consumer thread, each pinned to its own CPU,
 * move 16-byte descriptors through an rte_ring in bursts.  The measurement
 * protocol is shared with shmnet's Rust benchmarks (its own SPSC ring and the
 * `rtrb` crate), so any change here must be mirrored there:
 *
 *   1. Both threads pin themselves, report "ready", then spin on a start flag
 *      that main sets once both are ready.
 *   2. The producer writes elements {buf = seq, len = seq*3,
 *      flags = seq ^ 0x5a5a5a5a, aux = 0} in bursts of exactly B (the last
 *      burst is shorter if N % B != 0).  A partially accepted burst has its
 *      remainder retried; when nothing at all is accepted (ring full) the
 *      producer executes rte_pause() before retrying.
 *   3. The consumer dequeues bursts of up to B, checks every element, and
 *      executes rte_pause() when the ring is empty.
 *   4. t0 = CLOCK_MONOTONIC then `lfence; rdtsc`, taken by the producer
 *      immediately before its first enqueue.  t1 = `rdtscp; lfence` then
 *      CLOCK_MONOTONIC, taken by the consumer immediately after it has
 *      dequeued the last element.  (The TSC read is the one closest to the
 *      measured work on both ends.)  ticks/elem = (t1 - t0) / N,
 *      ns/elem = (mono1 - mono0) / N.  The TSC is assumed invariant and
 *      synchronised across cores (constant_tsc + nonstop_tsc).
 *
 * The EAL is deliberately NOT initialised: rte_ring_init() only needs plain
 * memory, and the enqueue/dequeue fast path is header-only (static inline in
 * rte_ring_elem.h), so what is timed is the inlined ring code compiled into
 * this binary, not a call into librte_ring.so.
 *
 * Output: exactly one JSON object on one line on stdout.
 * Exit codes: 0 ok, 1 runtime failure (incl. data mismatch), 2 bad argument.
 */

#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#include <rte_common.h>
#include <rte_pause.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <rte_version.h>

/* The descriptor moved through the ring: same layout as shmnet's. */
struct elem {
	uint32_t buf;
	uint32_t len;
	uint32_t flags;
	uint32_t aux;
};
_Static_assert(sizeof(struct elem) == 16, "descriptor must be 16 bytes");

#define ESIZE ((unsigned int)sizeof(struct elem))
#define FLAGS_XOR 0x5a5a5a5au

#define DEFAULT_CAPACITY 1024u
#define DEFAULT_BURST 32u
#define DEFAULT_COUNT 10000000ull
#define DEFAULT_REPS 5u

/* Sanity bounds for arguments (not DPDK limits, just keep things sane). */
#define MAX_CAPACITY (1u << 26)
#define MAX_BURST 4096u
#define MAX_REPS 10000u

struct config {
	unsigned int capacity;
	unsigned int burst;
	uint64_t count;
	unsigned int reps;
	int producer_cpu;
	int consumer_cpu;
};

/* Per-repetition timestamps.  Producer and consumer fields live on separate
 * cache lines so that writing t0 does not disturb the consumer. */
struct rep_times {
	_Alignas(64) uint64_t t0_tsc;
	struct timespec t0_mono;
	_Alignas(64) uint64_t t1_tsc;
	struct timespec t1_mono;
};

/* State shared by main and the two worker threads for one repetition. */
struct shared {
	const struct config *cfg;
	struct rte_ring *ring;
	struct rep_times times;
	_Alignas(64) atomic_int ready; /* workers pinned and waiting */
	_Alignas(64) atomic_int start; /* set by main to release both */
};

static const char *prog = "rte_ring_bench";

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: %s [options]\n"
		"\n"
		"SPSC throughput of DPDK rte_ring (no EAL), 16-byte elements.\n"
		"Prints one JSON line on stdout.\n"
		"\n"
		"Options:\n"
		"  --capacity C      usable ring capacity in elements (default %u;\n"
		"                    RING_F_EXACT_SZ, so the slot array is the next\n"
		"                    power of two above C)\n"
		"  --burst B         enqueue/dequeue burst size (default %u, 1..%u,\n"
		"                    must be <= capacity)\n"
		"  --count N         elements per repetition (default %llu)\n"
		"  --reps R          repetitions (default %u, max %u)\n"
		"  --producer-cpu P  CPU for the producer thread (default 0)\n"
		"  --consumer-cpu Q  CPU for the consumer thread (default 1)\n"
		"  --help            show this help\n"
		"\n"
		"Exit status: 0 ok, 1 runtime error or data mismatch, 2 bad argument.\n",
		prog, DEFAULT_CAPACITY, DEFAULT_BURST, MAX_BURST,
		(unsigned long long)DEFAULT_COUNT, DEFAULT_REPS, MAX_REPS);
}

/* Report a bad command line and exit 2. */
static _Noreturn __attribute__((format(printf, 1, 2))) void bad_arg(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help'.\n", prog);
	exit(2);
}

/* Strict unsigned parse: decimal digits only, whole string, within [lo, hi]. */
static uint64_t parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi)
{
	if (s == NULL || *s < '0' || *s > '9')
		bad_arg("%s: expected a non-negative integer, got '%s'", opt, s ? s : "");
	errno = 0;
	char *end = NULL;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0')
		bad_arg("%s: invalid number '%s'", opt, s);
	if (v < lo || v > hi)
		bad_arg("%s: %s out of range [%" PRIu64 ", %" PRIu64 "]", opt, s, lo, hi);
	return v;
}

static void parse_args(int argc, char **argv, struct config *cfg)
{
	enum { OPT_CAPACITY = 1000, OPT_BURST, OPT_COUNT, OPT_REPS,
	       OPT_PCPU, OPT_CCPU, OPT_HELP };
	static const struct option opts[] = {
		{ "capacity", required_argument, NULL, OPT_CAPACITY },
		{ "burst", required_argument, NULL, OPT_BURST },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "reps", required_argument, NULL, OPT_REPS },
		{ "producer-cpu", required_argument, NULL, OPT_PCPU },
		{ "consumer-cpu", required_argument, NULL, OPT_CCPU },
		{ "help", no_argument, NULL, OPT_HELP },
		{ NULL, 0, NULL, 0 },
	};

	*cfg = (struct config){
		.capacity = DEFAULT_CAPACITY,
		.burst = DEFAULT_BURST,
		.count = DEFAULT_COUNT,
		.reps = DEFAULT_REPS,
		.producer_cpu = 0,
		.consumer_cpu = 1,
	};

	/* Leading ':' so getopt reports problems to us instead of printing
	 * them itself; we print our own message and exit 2. Only long options
	 * are accepted (empty short-option list). */
	opterr = 0;
	int c;
	while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
		switch (c) {
		case OPT_CAPACITY:
			cfg->capacity = (unsigned int)parse_u64("--capacity", optarg, 1, MAX_CAPACITY);
			break;
		case OPT_BURST:
			cfg->burst = (unsigned int)parse_u64("--burst", optarg, 1, MAX_BURST);
			break;
		case OPT_COUNT:
			cfg->count = parse_u64("--count", optarg, 1, UINT64_MAX / 2);
			break;
		case OPT_REPS:
			cfg->reps = (unsigned int)parse_u64("--reps", optarg, 1, MAX_REPS);
			break;
		case OPT_PCPU:
			cfg->producer_cpu = (int)parse_u64("--producer-cpu", optarg, 0, CPU_SETSIZE - 1);
			break;
		case OPT_CCPU:
			cfg->consumer_cpu = (int)parse_u64("--consumer-cpu", optarg, 0, CPU_SETSIZE - 1);
			break;
		case OPT_HELP:
			usage(stdout);
			exit(0);
		case ':':
			bad_arg("option '%s' requires an argument", argv[optind - 1]);
		default:
			bad_arg("unrecognised option '%s'", argv[optind - 1]);
		}
	}
	if (optind < argc)
		bad_arg("unexpected argument '%s'", argv[optind]);

	if (cfg->burst > cfg->capacity)
		bad_arg("--burst (%u) must not exceed --capacity (%u)",
			cfg->burst, cfg->capacity);

	/* A CPU the process may not run on is a bad argument, not a runtime
	 * failure: check against our allowed set before starting threads. */
	cpu_set_t allowed;
	CPU_ZERO(&allowed);
	if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
		perror("sched_getaffinity");
		exit(1);
	}
	if (!CPU_ISSET(cfg->producer_cpu, &allowed) ||
	    !CPU_ISSET(cfg->consumer_cpu, &allowed))
		bad_arg("CPU %d or %d is not available to this process",
			cfg->producer_cpu, cfg->consumer_cpu);
	if (cfg->producer_cpu == cfg->consumer_cpu)
		fprintf(stderr, "%s: warning: producer and consumer share CPU %d; "
			"results will be meaningless\n", prog, cfg->producer_cpu);
}

/* Pin the calling thread to one CPU. Failure is fatal: unpinned numbers
 * are not comparable with the Rust side. */
static void pin_self(int cpu, const char *who)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (rc != 0) {
		fprintf(stderr, "%s: %s: pthread_setaffinity_np(cpu %d): %s\n",
			prog, who, cpu, strerror(rc));
		exit(1);
	}
}

/* Announce readiness, then busy-wait for main's start signal. Spinning
 * (rather than blocking) keeps both cores hot and avoids wake-up skew. */
static void wait_for_start(struct shared *sh)
{
	atomic_fetch_add_explicit(&sh->ready, 1, memory_order_release);
	while (!atomic_load_explicit(&sh->start, memory_order_acquire))
		rte_pause();
}

/* TSC at the start of the measured region: lfence keeps rdtsc from being
 * executed before earlier instructions have completed. */
static inline uint64_t tsc_begin(void)
{
	_mm_lfence();
	return __rdtsc();
}

/* TSC at the end of the measured region: rdtscp waits for all earlier
 * instructions to execute; the trailing lfence stops later ones (e.g. the
 * clock_gettime below) from starting before the counter is read. */
static inline uint64_t tsc_end(void)
{
	unsigned int aux;
	uint64_t t = __rdtscp(&aux);
	_mm_lfence();
	return t;
}

static void *producer_main(void *arg)
{
	struct shared *sh = arg;
	const struct config *cfg = sh->cfg;
	struct rte_ring *r = sh->ring;
	const unsigned int burst = cfg->burst;
	const uint64_t count = cfg->count;
	struct elem batch[MAX_BURST] __rte_cache_aligned;

	pin_self(cfg->producer_cpu, "producer");
	wait_for_start(sh);

	/* Monotonic first, TSC last: the TSC read is the one adjacent to the
	 * first enqueue. */
	clock_gettime(CLOCK_MONOTONIC, &sh->times.t0_mono);
	sh->times.t0_tsc = tsc_begin();

	uint64_t seq = 0;
	while (seq < count) {
		/* Build exactly one burst (shorter only at the very end). */
		unsigned int n = (count - seq < burst) ? (unsigned int)(count - seq) : burst;
		for (unsigned int i = 0; i < n; i++) {
			uint32_t s = (uint32_t)(seq + i);
			batch[i] = (struct elem){
				.buf = s,
				.len = s * 3u,
				.flags = s ^ FLAGS_XOR,
				.aux = 0,
			};
		}
		/* Push the whole burst; retry the unaccepted tail until done. */
		unsigned int done = 0;
		while (done < n) {
			unsigned int k = rte_ring_sp_enqueue_burst_elem(
				r, &batch[done], ESIZE, n - done, NULL);
			if (k == 0)
				rte_pause(); /* ring full */
			done += k;
		}
		seq += n;
	}
	return NULL;
}

static void *consumer_main(void *arg)
{
	struct shared *sh = arg;
	const struct config *cfg = sh->cfg;
	struct rte_ring *r = sh->ring;
	const unsigned int burst = cfg->burst;
	const uint64_t count = cfg->count;
	struct elem batch[MAX_BURST] __rte_cache_aligned;

	pin_self(cfg->consumer_cpu, "consumer");
	wait_for_start(sh);

	uint64_t expected = 0;
	while (expected < count) {
		unsigned int k = rte_ring_sc_dequeue_burst_elem(r, batch, ESIZE, burst, NULL);
		if (k == 0) {
			rte_pause(); /* ring empty */
			continue;
		}
		/* Verify every element: catches lost, duplicated, reordered or
		 * torn descriptors. */
		for (unsigned int i = 0; i < k; i++) {
			uint32_t s = (uint32_t)(expected + i);
			const struct elem *e = &batch[i];
			if (unlikely(e->buf != s || e->len != s * 3u ||
				     e->flags != (s ^ FLAGS_XOR) || e->aux != 0)) {
				fprintf(stderr,
					"%s: data mismatch at element %" PRIu64 ": got "
					"{buf=%" PRIu32 ", len=%" PRIu32 ", flags=%#" PRIx32
					", aux=%" PRIu32 "}, expected {buf=%" PRIu32
					", len=%" PRIu32 ", flags=%#" PRIx32 ", aux=0}\n",
					prog, expected + i, e->buf, e->len, e->flags, e->aux,
					s, s * 3u, s ^ FLAGS_XOR);
				/* Producer may be blocked on a full ring; just exit. */
				exit(1);
			}
		}
		expected += k;
	}

	/* TSC first, monotonic second: the TSC read is the one adjacent to the
	 * last dequeue. */
	sh->times.t1_tsc = tsc_end();
	clock_gettime(CLOCK_MONOTONIC, &sh->times.t1_mono);
	return NULL;
}

static void print_array(const double *v, unsigned int n)
{
	putchar('[');
	for (unsigned int i = 0; i < n; i++)
		printf("%s%.4f", i ? "," : "", v[i]);
	putchar(']');
}

int main(int argc, char **argv)
{
	struct config cfg;
	parse_args(argc, argv, &cfg);

	/* With RING_F_EXACT_SZ, rte_ring_init() sets size = next power of two
	 * strictly above the requested count (so exactly `capacity` slots are
	 * usable).  rte_ring_get_memsize_elem() wants that *slot* count (it
	 * rejects non-powers of two); passing the bare capacity would
	 * under-allocate by half and let the ring write past the buffer.
	 * This mirrors what rte_ring_create_elem() does internally. */
	const unsigned int flags = RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ;
	const unsigned int slots = rte_align32pow2(cfg.capacity + 1);
	ssize_t memsize = rte_ring_get_memsize_elem(ESIZE, slots);
	if (memsize < 0) {
		fprintf(stderr, "%s: rte_ring_get_memsize_elem(%u, %u): %s\n",
			prog, ESIZE, slots, strerror((int)-memsize));
		return 1;
	}

	/* Cache-line aligned plain heap memory instead of an EAL memzone. */
	void *mem = NULL;
	int rc = posix_memalign(&mem, RTE_CACHE_LINE_SIZE, (size_t)memsize);
	if (rc != 0) {
		fprintf(stderr, "%s: posix_memalign(%zd): %s\n", prog, memsize, strerror(rc));
		return 1;
	}
	/* Touch every page now so that first-touch page faults do not land
	 * inside the first repetition's timed region. */
	memset(mem, 0, (size_t)memsize);
	struct rte_ring *ring = mem;

	double *ticks = calloc(cfg.reps, sizeof(double));
	double *nanos = calloc(cfg.reps, sizeof(double));
	if (ticks == NULL || nanos == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog);
		return 1;
	}

	for (unsigned int rep = 0; rep < cfg.reps; rep++) {
		/* Fresh ring state each repetition (init resets head/tail
		 * indices; the slot memory is reused). */
		rc = rte_ring_init(ring, "bench", cfg.capacity, flags);
		if (rc != 0) {
			fprintf(stderr, "%s: rte_ring_init: %s\n", prog, strerror(-rc));
			return 1;
		}
		if (rte_ring_get_capacity(ring) != cfg.capacity ||
		    rte_ring_get_size(ring) != slots) {
			fprintf(stderr, "%s: unexpected ring geometry: capacity %u size %u\n",
				prog, rte_ring_get_capacity(ring), rte_ring_get_size(ring));
			return 1;
		}

		struct shared *sh = aligned_alloc(64, RTE_ALIGN_CEIL(sizeof(*sh), 64));
		if (sh == NULL) {
			fprintf(stderr, "%s: out of memory\n", prog);
			return 1;
		}
		memset(sh, 0, sizeof(*sh));
		sh->cfg = &cfg;
		sh->ring = ring;
		atomic_init(&sh->ready, 0);
		atomic_init(&sh->start, 0);

		pthread_t prod, cons;
		if ((rc = pthread_create(&cons, NULL, consumer_main, sh)) != 0 ||
		    (rc = pthread_create(&prod, NULL, producer_main, sh)) != 0) {
			fprintf(stderr, "%s: pthread_create: %s\n", prog, strerror(rc));
			return 1;
		}

		/* Release both threads only once both are pinned and spinning. */
		while (atomic_load_explicit(&sh->ready, memory_order_acquire) < 2)
			sched_yield();
		atomic_store_explicit(&sh->start, 1, memory_order_release);

		pthread_join(prod, NULL);
		pthread_join(cons, NULL);

		const struct rep_times *t = &sh->times;
		int64_t dns = (int64_t)(t->t1_mono.tv_sec - t->t0_mono.tv_sec) * 1000000000LL +
			      (t->t1_mono.tv_nsec - t->t0_mono.tv_nsec);
		ticks[rep] = (double)(int64_t)(t->t1_tsc - t->t0_tsc) / (double)cfg.count;
		nanos[rep] = (double)dns / (double)cfg.count;
		free(sh);
	}

	/* Version of the headers compiled in: the timed fast path is their
	 * inline code. */
	char version[32];
	snprintf(version, sizeof(version), "%d.%02d.%d%s", RTE_VER_YEAR,
		 RTE_VER_MONTH, RTE_VER_MINOR, RTE_VER_SUFFIX);

	printf("{\"impl\":\"rte_ring\",\"burst\":%u,\"elems\":%" PRIu64
	       ",\"reps\":%u,\"capacity\":%u,\"ticks_per_elem\":",
	       cfg.burst, cfg.count, cfg.reps, cfg.capacity);
	print_array(ticks, cfg.reps);
	printf(",\"ns_per_elem\":");
	print_array(nanos, cfg.reps);
	printf(",\"dpdk_version\":\"%s\"}\n", version);

	free(ticks);
	free(nanos);
	free(mem);
	return fflush(stdout) == 0 ? 0 : 1;
}
