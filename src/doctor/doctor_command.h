// `infera-router doctor`: why does this fleet give no cache hits? (doc/operations.md
// "Doctor").
//
//   infera-router doctor --router-tokenizer-path DIR
//       --worker http://10.0.0.5:30000,model_name=M,kv_events_endpoint=tcp://10.0.0.5:5557
//       [--workers-file F | --discovery-backend etcd --etcd-endpoint H:2379]
//       [--kv-events-topic T] [--fingerprints FILE] [--timeout-ms 5000]
//
// Takes the router's own fleet flags (parsed by the router's discovery code, so a
// --worker value means exactly what it means to the router); the router's other flags
// are accepted and ignored (so a router command line can be reused with `doctor`
// inserted). Prints one line per check and worker (FleetDoctor's checks), with the cause
// and the fix under each failure. Exit status: 0 when no check failed, 1 when one did,
// 2 for bad usage (flags, discovery configuration, no worker found).
#pragma once

namespace infera::doctor {

// argv as main() receives it; a leading "doctor" subcommand word (argv[1]) is skipped.
int RunDoctorCommand(int argc, char** argv);

}  // namespace infera::doctor
