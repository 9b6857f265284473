/*
 * watchdog.c — progress counters and the per-rank watchdog (watchdog.h).
 */
#include "node/watchdog.h"

#include <mpi.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "common/sl.h"

#define WATCH_PERIOD_MS 100   /* how often the thread looks */
/* Between the log line and MPI_Abort: the other ranks' watchdogs, which
 * usually see the same hang within a period or two, get to say theirs
 * before mpirun's teardown kills them. */
#define WATCH_GRACE_MS 1000
/* MPI_Abort that cannot reach mpirun (a partition) must not keep the
 * process: SIGALRM's default action ends it this long after. */
#define WATCH_ABORT_ALARM_S 5
/* A launcher (mpirun, orted) still there this long after a rank's abort
 * is killed by it (start_reaper). */
#define WATCH_REAP_S 3

/* The stall bound covers a step of up to this many tokens as it is; a
 * larger one gets it times tokens / WATCH_STALL_TOKENS, or that squared
 * when the rank waits for other pipeline stages. Measured: a 4,000-token
 * prefill of SmolLM2-135M (Q4_1, CPU, one thread a rank, loaded 2-core
 * box) kept stage 1 of a pp 2 group waiting for stage 0 for over 78 s; a
 * linear allowance (78 s at the default 10 s bound) was not enough. A
 * partition in such a step is then caught by the step watchdog, or sooner
 * by Open MPI's own keepalive (docs/operations.md). */
#define WATCH_STALL_TOKENS 512

static _Atomic uint64_t g_steps, g_ticks;
static _Atomic long g_work;              /* the running step's tokens */
static _Atomic int g_pipelined;          /* it waits for other stages */
static _Atomic int64_t g_step_start_us;  /* 0: no step runs */
static _Atomic int64_t g_last_tick_us;   /* 0: no plan yet (workers) */

static int64_t now_us(void) { return (int64_t)(sl_now() * 1e6); }

void node_progress_begin(void)
{
	int64_t t = now_us();
	atomic_store(&g_work, 0);
	atomic_store(&g_last_tick_us, t);
	atomic_store(&g_step_start_us, t);
}

void node_progress_work(long tokens, int pipelined)
{
	atomic_fetch_add(&g_work, tokens);
	atomic_store(&g_pipelined, pipelined);
}

void node_progress_tick(void)
{
	atomic_fetch_add(&g_ticks, 1);
	atomic_store(&g_last_tick_us, now_us());
}

void node_progress_end(void)
{
	atomic_store(&g_step_start_us, 0);
	atomic_store(&g_last_tick_us, now_us());
	atomic_fetch_add(&g_steps, 1);
}

void node_progress_get(node_progress_view *v)
{
	int64_t start = atomic_load(&g_step_start_us);
	v->steps = atomic_load(&g_steps);
	v->ticks = atomic_load(&g_ticks);
	v->in_step_ms = start ? (now_us() - start) / 1000 : 0;
	if (start && v->in_step_ms == 0)
		v->in_step_ms = 1; /* running: never reads as idle */
}

static struct {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int running, quit;
	node_watch_opts o;
} g_watch = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* Whether process pid is one of Open MPI's launchers: mpirun (this host's
 * ranks are its children) or orted (another host's); its name into comm.
 * Under srun, or started by hand, the parent is something else and is
 * left alone. */
static int is_launcher(pid_t pid, char *comm, size_t n)
{
	static const char *const names[] = {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted"};
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	if (!fgets(comm, (int)n, f))
		comm[0] = 0;
	fclose(f);
	comm[strcspn(comm, "\n")] = 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(comm, names[i]))
			return 1;
	return 0;
}

/* MPI_Abort ends this rank at once, but its launcher may then wait for
 * ever: cut off from another host's daemon, it waits for that daemon to
 * report its ranks gone (Open MPI learns of a lost daemon only from TCP:
 * minutes, without the oob keepalive flags; docs/operations.md), and so
 * does the orted on the far side, which cannot reach mpirun. Measured in
 * tests/multihost.sh: both were still there a minute after the cut, the
 * ranks long gone. So, before the abort, a reaper is started: a shell in
 * a session of its own (the teardown, which kills the rank's process
 * group, must not take it along) that waits up to WATCH_REAP_S for the
 * launcher to exit and kills it if it is still there (still the same
 * program at that pid): mpirun on one side of a cut, orted on the
 * other. When the abort ends the job as it should, the launcher is gone
 * well before and the reaper leaves at once. A shell, not a fork that
 * runs on: after fork in a threaded process only exec is safe, and the
 * reaper must not hold the rank's pipes, which the launcher reads to the
 * end before it counts the rank gone, or look like a rank to `pgrep`. */
static void start_reaper(pid_t launcher, const char *comm)
{
	static const char script[] =
		"i=0; while [ $i -lt $3 ]; do kill -0 \"$1\" 2>/dev/null || exit 0; sleep 0.1; i=$((i + 1)); done; "
		"[ \"$(cat /proc/$1/comm 2>/dev/null)\" = \"$2\" ] && kill -KILL \"$1\"";
	char pid[24], polls[24];
	struct rlimit rl;
	int max_fd = getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur > 65536 ? 65536 : (int)rl.rlim_cur;
	snprintf(pid, sizeof pid, "%d", (int)launcher);
	snprintf(polls, sizeof polls, "%d", WATCH_REAP_S * 10);
	if (fork() != 0)
		return; /* the rank goes on to MPI_Abort; a failed fork: no reaper */
	setsid();
	int null = open("/dev/null", O_RDWR);
	for (int fd = 0; fd < 3 && null >= 0; fd++)
		dup2(null, fd);
	for (int fd = 3; fd < max_fd; fd++)
		close(fd);
	execl("/bin/sh", "sh", "-c", script, "shardline-watchdog-reaper", pid, comm, polls, (char *)NULL);
	_exit(127);
}

static void fire(void)
{
	struct timespec ts = {WATCH_GRACE_MS / 1000, (WATCH_GRACE_MS % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	int inited = 0, done = 0;
	MPI_Initialized(&inited);
	MPI_Finalized(&done);
	if (inited && !done) {
		char comm[64] = "";
		pid_t parent = getppid();
		if (is_launcher(parent, comm, sizeof comm)) {
			SL_WARN("watchdog", "MPI_Abort; %s (pid %d) is killed if it is still there in %d s",
				comm, (int)parent, WATCH_REAP_S);
			start_reaper(parent, comm);
		}
		alarm(WATCH_ABORT_ALARM_S);
		MPI_Abort(MPI_COMM_WORLD, 70);
	}
	_exit(70);
}

/* Why this rank must end now, into why; 0 when all is well. */
static int check(const node_watch_opts *o, char *why, size_t n)
{
	node_progress_view v;
	node_progress_get(&v);
	int64_t last = atomic_load(&g_last_tick_us);
	long quiet_ms = last ? (long)((now_us() - last) / 1000) : 0;
	if (v.in_step_ms && o->step_ms > 0 && v.in_step_ms > o->step_ms)
		return snprintf(why, n, "step %llu has run for %lld ms, over --step-watchdog-ms %d: "
				"ending the group", (unsigned long long)v.steps + 1,
				(long long)v.in_step_ms, o->step_ms), 1;
	long work = atomic_load(&g_work);
	double f = work > WATCH_STALL_TOKENS ? (double)work / WATCH_STALL_TOKENS : 1;
	f = atomic_load(&g_pipelined) ? f * f : f;
	double bound = o->stall_ms * f;
	long stall = bound < 1e9 ? (long)bound : 1000000000L;
	if (v.in_step_ms && o->stall_ms > 0 && quiet_ms > stall)
		return snprintf(why, n, "step %llu made no progress for %ld ms (--stall-ms %d, %ld ms "
				"for its %ld tokens): a rank or host of the group stopped answering "
				"(partition or lost host?); ending the group",
				(unsigned long long)v.steps + 1, quiet_ms, o->stall_ms, stall, work), 1;
	if (!v.in_step_ms && o->worker && o->stall_ms > 0 && last && quiet_ms > o->stall_ms)
		return snprintf(why, n, "no step plan or keepalive from the leader for %ld ms "
				"(--stall-ms %d): the leader or its host is unreachable; ending the group",
				quiet_ms, o->stall_ms), 1;
	return 0;
}

static void *watch_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_watch.mu);
	while (!g_watch.quit) {
		char why[SL_ERRLEN];
		if (check(&g_watch.o, why, sizeof why)) {
			pthread_mutex_unlock(&g_watch.mu);
			SL_ERROR("watchdog", "%s", why);
			fire();
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += WATCH_PERIOD_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&g_watch.cv, &g_watch.mu, &ts);
	}
	pthread_mutex_unlock(&g_watch.mu);
	return NULL;
}

int node_watch_start(const node_watch_opts *o, char *err, size_t errlen)
{
	if (g_watch.running || (o->step_ms <= 0 && o->stall_ms <= 0))
		return SL_OK;
	g_watch.o = *o;
	g_watch.quit = 0;
	if (pthread_create(&g_watch.th, NULL, watch_main, NULL))
		return sl_errf(err, errlen, SL_ENOMEM, "cannot start the watchdog thread");
	g_watch.running = 1;
	return SL_OK;
}

void node_watch_stop(void)
{
	if (!g_watch.running)
		return;
	pthread_mutex_lock(&g_watch.mu);
	g_watch.quit = 1;
	pthread_cond_signal(&g_watch.cv);
	pthread_mutex_unlock(&g_watch.mu);
	pthread_join(g_watch.th, NULL);
	g_watch.running = 0;
}

void node_test_stall(int rank)
{
	static int ms = -1, only = -1;
	if (ms < 0) { /* only with SL_TEST_HOOKS=1 too: a stray variable cannot slow a server */
		const char *v = getenv("SL_TEST_STALL_STEP_MS"), *r = getenv("SL_TEST_STALL_RANK");
		const char *on = getenv("SL_TEST_HOOKS");
		ms = v && on && !strcmp(on, "1") ? atoi(v) : 0;
		only = r ? atoi(r) : -1;
	}
	if (ms <= 0 || (only >= 0 && only != rank))
		return;
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) && ts.tv_sec + ts.tv_nsec > 0)
		;
}
