// RunWorker: the body of `pier worker`, one model instance in its own process. It speaks the
// worker protocol (ipc/worker.proto) on `fd`, a socket the supervisor passed at exec: takes
// the Hello (refusing another protocol version with both versions named), loads the model
// in its own device set with the budget the supervisor granted, answers Ready (or Refused with
// the load's error), then serves Submit / Abort / AbortAll until Shutdown or until the
// supervisor goes away, sending events as the engine produces them and Stats every heartbeat
// interval (also while idle: the supervisor's proof of life).
//
// PIER_WORKER_TEST_FAULT (tests only) makes it misbehave right after the handshake:
// "exit-after-ready" exits 9, "garbage-after-ready" writes a frame that does not parse, "leak"
// allocates 32 MiB that nobody charges every heartbeat (up to 2 GiB); with
// PIER_WORKER_TEST_FAULT_MODEL=ID only the workers of model ID do.
//
// The exit status says how it ended: 0 after Shutdown or the supervisor closing, 2 for a
// protocol error or refused handshake, 3 when the model did not load.
//
// Thread-safety: runs the process; a heartbeat thread and the engine thread send frames beside
// the reader (the channel serializes them).
#pragma once

namespace pier::serving {

int RunWorker(int fd);

}  // namespace pier::serving
