// infera-bench: workload replay and policy comparison (doc/sim.md).
//   infera-bench offline --trace FILE --engines N --num-gpu-blocks B --policies ... --json OUT
//   infera-bench online  --router URL ... --json OUT
#include <CLI/CLI.hpp>

#include "offline_command.h"
#include "online_command.h"

int main(int argc, char** argv) {
  CLI::App app{"infera-bench: replay workloads against simulated engines or a running router"};
  app.require_subcommand(1);
  infera::bench::OfflineFlags offline;
  CLI::App* off = app.add_subcommand("offline", "discrete-event simulation in virtual time");
  infera::bench::AddOfflineFlags(*off, offline);
  infera::bench::OnlineFlags online;
  CLI::App* on = app.add_subcommand("online", "drive running routers over HTTP");
  infera::bench::AddOnlineFlags(*on, online);
  CLI11_PARSE(app, argc, argv);
  if (off->parsed()) return infera::bench::RunOffline(offline);
  if (on->parsed()) return infera::bench::RunOnline(online);
  return 2;
}
