// mimalloc options the router sets before main() (doc/soak.md, session 8).
//
// mimalloc returns the memory of freed pages to the OS only after a delay
// (decommit_delay 25 ms, segment_decommit_delay 500 ms), and only when the thread
// that owns the segment next allocates or frees in it. The thread that allocates
// the router's bursts is libzmq's I/O thread (message buffers), which goes quiet
// once a backlog has drained: the scheduled decommit then never ran, and the RSS
// stayed at the burst's height. With both delays 0, a freed span is decommitted when
// it is freed. Measured in the paced index soak (12M blocks, 8 workers, 11 joins and
// leaves): RSS after warm-up 28.1-33.4 MiB with the defaults, 27.1-29.3 with 0.
// A MIMALLOC_DECOMMIT_DELAY / MIMALLOC_SEGMENT_DECOMMIT_DELAY in the environment
// still wins.
#include <mimalloc.h>

#include <cstdlib>

namespace {

struct AllocatorOptions {
  AllocatorOptions() {
    if (std::getenv("MIMALLOC_DECOMMIT_DELAY") == nullptr) {
      mi_option_set(mi_option_decommit_delay, 0);
    }
    if (std::getenv("MIMALLOC_SEGMENT_DECOMMIT_DELAY") == nullptr) {
      mi_option_set(mi_option_segment_decommit_delay, 0);
    }
  }
};

const AllocatorOptions allocator_options;

}  // namespace
