// RequestBoard: the requests the server is answering now, for GET /admin/requests and the web
// console's live view: per request its model, route, tenant, class, age, whether it has
// produced anything yet, how many tokens (or items) so far, and for a pipeline the stage it is
// in. A slow or stuck request is then visible by name instead of as a number in a queue depth.
//
// The front end opens a ticket when it hands a request to a model and drops it when the answer
// is complete (or the client is gone): the ticket's destructor takes the request off the board.
// Updates are atomic stores on the ticket (no lock on the token path); Snapshot takes the
// board's lock only to copy the list.
//
// What "queued" means: nothing produced yet. That is a request waiting in a queue, or one
// whose prompt is still being processed; "running" is one producing output. Both come from the
// front end's side of the request, so they read the same for models in worker processes.
//
// Thread-safety: every method may be called from any thread; a ticket may outlive the board's
// users but not the board.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace pier::serving {

struct LiveRequestInfo {
  std::string request_id;  // the API's id ("chatcmpl-..."), or empty
  std::string model;
  std::string route;           // "/v1/chat/completions"
  std::string tenant;          // empty: none
  std::string priority_class;  // "normal", "interactive", ...
};

struct LiveRequestRow {
  LiveRequestInfo info;
  double age_seconds = 0;
  bool running = false;  // has produced output
  int64_t tokens = 0;    // output tokens (or items) so far
  std::string stage;     // a pipeline's stage now; empty otherwise
};

class RequestBoard {
 public:
  class Ticket {
   public:
    // What the board shows of one request (public for the board's use only).
    struct Entry {
      LiveRequestInfo info;
      int64_t started_us = 0;
      std::atomic<int64_t> tokens{0};
      std::atomic<bool> running{false};
      Mutex stage_mutex;
      std::string stage PIER_GUARDED_BY(stage_mutex);
    };

   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

    // Output arrived: `count` more tokens (or items); the request is running.
    void Produced(int64_t count);
    void SetStage(std::string stage);

   private:
    friend class RequestBoard;
    Ticket(RequestBoard* board, uint64_t key, std::shared_ptr<Entry> entry)
        : board_(board), key_(key), entry_(std::move(entry)) {}
    RequestBoard* const board_;
    const uint64_t key_;
    const std::shared_ptr<Entry> entry_;  // also on the board while the ticket lives
  };

  RequestBoard();
  ~RequestBoard();

  std::unique_ptr<Ticket> Open(LiveRequestInfo info);
  // The oldest `max` requests first; `total` (when set) gets how many there are.
  std::vector<LiveRequestRow> Snapshot(size_t max, size_t* total = nullptr) const;
  size_t size() const;

 private:
  using Entry = Ticket::Entry;
  void Close(uint64_t key);

  mutable Mutex mutex_;
  uint64_t next_key_ PIER_GUARDED_BY(mutex_) = 1;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_ PIER_GUARDED_BY(mutex_);
};

}  // namespace pier::serving
