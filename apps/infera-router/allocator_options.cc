// mimalloc options the router sets before main() (doc/soak.md, session 8; start-up:
// doc/snapshot.md §8.1, session 16).
//
// mimalloc returns the memory of freed pages to the OS only after a delay
// (decommit_delay 25 ms, segment_decommit_delay 500 ms), and only when the thread
// that owns the segment next allocates or frees in it. The thread that allocates
// the router's bursts is libzmq's I/O thread (message buffers), which goes quiet
// once a backlog has drained: the scheduled decommit then never ran, and the RSS
// stayed at the burst's height. With both delays 0, a freed span is decommitted when
// it is freed. Measured in the paced index soak (12M blocks, 8 workers, 11 joins and
// leaves): RSS after warm-up 28.1-33.4 MiB with the defaults, 27.1-29.3 with 0.
//
// Until the first /ready both delays are kStartupDelayMs instead: at start the
// subscriptions of thousands of targets, their verify replays and a peer join's
// 512 KiB chunks allocate and free in bursts on several threads, and with delays of 0
// every free span was given back (madvise, a TLB shootdown of every core running the
// process, the snapshot build's among them) and faulted in again by the next burst:
// a visible part of the subscription and ZMQ threads' samples beside the build in a
// restart at 10M blocks (doc/snapshot.md §8.1 step 5), and a join's transfer of 260 MB
// took 4.8-8.0 s instead of 2.8-4.3 s at load 6-15 (doc/perf-scale.md). The burst
// is over at /ready (EndStartupAllocatorOptions), where the steady delays of 0 apply
// again; a span scheduled meanwhile is decommitted by its thread's next free there.
// A MIMALLOC_DECOMMIT_DELAY / MIMALLOC_SEGMENT_DECOMMIT_DELAY in the environment
// still wins, at start and after.
#include <mimalloc.h>

#include <cstdlib>

#include "allocator_options.h"

namespace {

constexpr long kStartupDelayMs = 1000;

bool FromEnv(const char* name) { return std::getenv(name) != nullptr; }

void SetDelays(long ms) {
  if (!FromEnv("MIMALLOC_DECOMMIT_DELAY")) mi_option_set(mi_option_decommit_delay, ms);
  if (!FromEnv("MIMALLOC_SEGMENT_DECOMMIT_DELAY")) {
    mi_option_set(mi_option_segment_decommit_delay, ms);
  }
}

struct AllocatorOptions {
  AllocatorOptions() { SetDelays(kStartupDelayMs); }
};

const AllocatorOptions allocator_options;

}  // namespace

namespace infera::app {

void EndStartupAllocatorOptions() { SetDelays(0); }

}  // namespace infera::app
