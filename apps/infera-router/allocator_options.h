// mimalloc options of the router (allocator_options.cc): the start-up ones end at the
// first /ready (RouterOptions::on_ready). Without mimalloc (sanitizer builds,
// -DINFERA_MIMALLOC=OFF) a no-op.
#pragma once

namespace infera::app {

#ifdef INFERA_ROUTER_MIMALLOC
void EndStartupAllocatorOptions();
#else
inline void EndStartupAllocatorOptions() {}
#endif

}  // namespace infera::app
