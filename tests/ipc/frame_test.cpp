// Framing and conversions of the supervisor <-> worker protocol: round trips, frames split at
// every byte, and everything a confused peer could send (oversized lengths, bytes that do not
// parse, unknown message types, truncated frames, out-of-range values), plus a seeded fuzz loop
// over random and mutated frames that must never crash and never yield a frame the decoder
// should have refused.
#include "ipc/frame.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ipc/convert.h"

namespace pier::ipc {
namespace {

engine::Request SampleRequest() {
  engine::Request r;
  r.id = "cmpl-1-0";
  r.prompt_tokens = {1, 2, 3, 40000};
  r.sampling.temperature = 0.7f;
  r.sampling.top_k = 40;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 12345678901234ULL;
  r.sampling.logprobs = 3;
  r.sampling.logit_bias = {{5, -100.0f}, {7, 2.5f}};
  r.n = 2;
  r.max_tokens = 64;
  r.stop = {"\n\n", "User:"};
  r.stop_token_ids = {2};
  r.ignore_eos = true;
  r.skip_special_tokens = false;
  r.prompt_logprobs = 1;
  r.priority = engine::Priority::kHigh;
  r.deadline_us = 99;
  r.tenant = "team-a";
  r.tenant_weight = 2.5;
  r.on_deadline = engine::Request::DeadlineAction::kDelay;
  r.arrival_us = 1234;
  r.constraint = {grammar::OutputConstraint::Kind::kJsonSchema, R"({"type":"integer"})",
                  "<tool_call>\n", "\n</tool_call>"};
  return r;
}

proto::Frame SubmitFrame() {
  proto::Frame frame;
  ToProto(SampleRequest(), frame.mutable_submit()->mutable_request());
  return frame;
}

TEST(IpcConvertTest, RequestsEventsAndStatsRoundTrip) {
  proto::Request wire;
  ToProto(SampleRequest(), &wire);
  Result<engine::Request> back = FromProto(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const engine::Request& r = *back;
  const engine::Request want = SampleRequest();
  EXPECT_EQ(r.id, want.id);
  EXPECT_EQ(r.prompt_tokens, want.prompt_tokens);
  EXPECT_EQ(r.sampling.temperature, want.sampling.temperature);
  EXPECT_EQ(r.sampling.top_k, want.sampling.top_k);
  EXPECT_EQ(r.sampling.seed, want.sampling.seed);
  EXPECT_EQ(r.sampling.logprobs, want.sampling.logprobs);
  EXPECT_EQ(r.sampling.logit_bias, want.sampling.logit_bias);
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.max_tokens, 64);
  EXPECT_EQ(r.stop, want.stop);
  EXPECT_EQ(r.stop_token_ids, want.stop_token_ids);
  EXPECT_TRUE(r.ignore_eos);
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_EQ(r.prompt_logprobs, 1);
  EXPECT_EQ(r.priority, engine::Priority::kHigh);
  EXPECT_EQ(r.deadline_us, 99);
  EXPECT_EQ(r.tenant, "team-a");
  EXPECT_EQ(r.tenant_weight, 2.5);
  EXPECT_EQ(r.on_deadline, engine::Request::DeadlineAction::kDelay);
  EXPECT_EQ(r.arrival_us, 1234);
  EXPECT_EQ(r.constraint, want.constraint);
  // Unset optionals stay unset.
  engine::Request plain;
  plain.id = "p";
  plain.prompt_tokens = {1};
  ToProto(plain, &wire);
  back = FromProto(wire);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->sampling.logprobs.has_value());
  EXPECT_FALSE(back->prompt_logprobs.has_value());
  EXPECT_FALSE(back->deadline_us.has_value());
  EXPECT_FALSE(back->constraint.active());
  // A constraint kind this side does not know is refused, never dropped.
  wire.set_constraint_kind(7);
  back = FromProto(wire);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("constraint kind 7"), std::string::npos);

  engine::Event e;
  e.choice = 1;
  e.token = 42;
  e.text = "héllo";
  e.logprob = -0.5f;
  e.top_logprobs = {{42, -0.5f}, {7, -1.25f}};
  e.prompt_logprobs = {{1, 3, -2.0f, {{3, -2.0f}}}};
  e.finish = engine::FinishReason::kLength;
  e.error = "";
  e.request_fault = true;
  e.queue_expired = true;
  e.usage = {10, 5, 4};
  e.times = {1, 2, 3, 4};
  proto::Event event_wire;
  ToProto(e, "req", &event_wire);
  EXPECT_EQ(event_wire.request_id(), "req");
  Result<engine::Event> event = FromProto(event_wire);
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(event->choice, 1);
  EXPECT_EQ(event->token, 42);
  EXPECT_EQ(event->text, "héllo");
  EXPECT_TRUE(event->request_fault);
  EXPECT_TRUE(event->queue_expired);
  EXPECT_EQ(event->logprob, -0.5f);
  ASSERT_EQ(event->top_logprobs.size(), 2u);
  EXPECT_EQ(event->top_logprobs[1].token, 7);
  ASSERT_EQ(event->prompt_logprobs.size(), 1u);
  EXPECT_EQ(event->prompt_logprobs[0].token, 3);
  EXPECT_EQ(event->finish, engine::FinishReason::kLength);
  EXPECT_EQ(event->usage.cached_prompt_tokens, 4);
  EXPECT_EQ(event->times.finished_us, 4);

  engine::EngineStats stats;
  stats.running = 3;
  stats.kv_blocks_max = 77;
  stats.last_step_at_us = 555;
  stats.tokens_per_step = 2.5;
  stats.waiting_by_class = {1, 2, 3, 4};
  stats.admissions_per_s = 12.5;
  stats.reserved_seqs = 3;
  stats.fair_share_clocks = {0, 0, 7.5, 0};
  stats.tenants = {
      {.tenant = "t", .weight = 2, .virtual_time = 8, .live_sequences = 1, .tokens = 16}};
  proto::Stats stats_wire;
  ToProto(stats, &stats_wire);
  const engine::EngineStats stats_back = FromProto(stats_wire);
  EXPECT_EQ(stats_back.running, 3);
  EXPECT_EQ(stats_back.kv_blocks_max, 77);
  EXPECT_EQ(stats_back.last_step_at_us, 555);
  EXPECT_EQ(stats_back.tokens_per_step, 2.5);
  EXPECT_EQ(stats_back.waiting_by_class, stats.waiting_by_class);
  EXPECT_EQ(stats_back.admissions_per_s, 12.5);
  EXPECT_EQ(stats_back.reserved_seqs, 3);
  EXPECT_EQ(stats_back.fair_share_clocks[2], 7.5);
  ASSERT_EQ(stats_back.tenants.size(), 1u);
  EXPECT_EQ(stats_back.tenants[0].tenant, "t");
  EXPECT_EQ(stats_back.tenants[0].tokens, 16);

  proto::SubmitReply reply;
  ToProto(ResourceExhaustedError("queue full"), "r", &reply);
  const Status status = FromProto(reply);
  EXPECT_EQ(status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(), "queue full");
  ToProto(Status::Ok(), "r", &reply);
  EXPECT_TRUE(FromProto(reply).ok());
}

TEST(IpcConvertTest, OutOfRangeValuesFromAPeerAreRefusedByName) {
  proto::Request wire;
  ToProto(SampleRequest(), &wire);
  wire.set_priority(9);
  Result<engine::Request> r = FromProto(wire);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("priority 9 is not a class"), std::string::npos);
  ToProto(SampleRequest(), &wire);
  wire.set_tenant_weight(0);
  EXPECT_NE(FromProto(wire).status().message().find("tenant weight 0"), std::string::npos);
  ToProto(SampleRequest(), &wire);
  wire.set_on_deadline(5);
  EXPECT_NE(FromProto(wire).status().message().find("deadline action 5"), std::string::npos);
  proto::Event event;
  event.set_finish(17);
  EXPECT_NE(FromProto(event).status().message().find("finish 17"), std::string::npos);
  event.clear_finish();
  event.set_choice(-1);
  EXPECT_NE(FromProto(event).status().message().find("negative choice"), std::string::npos);
  proto::SubmitReply reply;
  reply.set_code(200);
  EXPECT_EQ(FromProto(reply).code(), StatusCode::kInternal);
}

TEST(IpcFrameTest, FramesSurviveBeingSplitAtEveryByte) {
  const std::string one = EncodeFrame(SubmitFrame());
  proto::Frame stats;
  stats.mutable_stats()->set_running(4);
  const std::string two = EncodeFrame(stats);
  const std::string stream = one + two;
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    FrameDecoder decoder;
    decoder.Append(std::string_view(stream).substr(0, cut));
    std::vector<proto::Frame> frames;
    while (true) {
      Result<std::optional<proto::Frame>> next = decoder.Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      frames.push_back(**next);
    }
    decoder.Append(std::string_view(stream).substr(cut));
    while (true) {
      Result<std::optional<proto::Frame>> next = decoder.Next();
      ASSERT_TRUE(next.ok()) << next.status().ToString();
      if (!next->has_value()) break;
      frames.push_back(**next);
    }
    ASSERT_EQ(frames.size(), 2u) << "cut at " << cut;
    EXPECT_EQ(FrameName(frames[0]), "submit");
    EXPECT_EQ(frames[0].submit().request().id(), "cmpl-1-0");
    EXPECT_EQ(frames[1].stats().running(), 4);
    EXPECT_EQ(decoder.buffered(), 0u);
  }
}

TEST(IpcFrameTest, WhatIsNotAFrameIsRefusedAndTheDecoderStaysFailed) {
  struct Case {
    std::string bytes;
    std::string expected;
  };
  const std::string huge = std::string("\xff\xff\xff\x7f", 4);
  const std::vector<Case> cases = {
      {huge, "larger than the limit"},
      {std::string("\x03\x00\x00\x00\xff\xff\xff", 7), "does not parse"},
      {std::string("\x00\x00\x00\x00", 4), "unknown message type"},
      // Field 99 (unknown to this version) with a varint: parses, but carries no known body.
      {std::string("\x03\x00\x00\x00\x98\x06\x01", 7), "unknown message type"},
  };
  for (const Case& c : cases) {
    FrameDecoder decoder;
    decoder.Append(c.bytes);
    Result<std::optional<proto::Frame>> next = decoder.Next();
    ASSERT_FALSE(next.ok()) << c.expected;
    EXPECT_EQ(next.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(next.status().message().find(c.expected), std::string::npos)
        << next.status().message();
    decoder.Append(EncodeFrame(SubmitFrame()));
    EXPECT_FALSE(decoder.Next().ok()) << "nothing after a bad frame is trusted";
  }
}

TEST(IpcFrameTest, ChannelsCarryFramesAndReportTruncationAndClosing) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Channel a(fds[0]);
  Channel b(fds[1]);
  // A large frame (several socket buffers) arrives whole while the writer is still writing.
  proto::Frame big;
  for (int i = 0; i < 20000; ++i) {
    proto::Event* e = big.mutable_events()->add_events();
    e->set_request_id("r" + std::to_string(i));
    e->set_text("some text");
  }
  std::thread writer([&] { ASSERT_TRUE(a.Send(big).ok()); });
  Result<proto::Frame> got = b.Receive();
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->events().events_size(), 20000);
  EXPECT_EQ(got->events().events(19999).request_id(), "r19999");

  // Half a frame, then the peer goes away: DATA_LOSS naming the truncation.
  const std::string bytes = EncodeFrame(SubmitFrame());
  ASSERT_EQ(::write(a.fd(), bytes.data(), bytes.size() / 2),
            static_cast<ssize_t>(bytes.size() / 2));
  a.Shutdown();
  Result<proto::Frame> truncated = b.Receive();
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("in the middle of a frame"), std::string::npos)
      << truncated.status().message();
  EXPECT_FALSE(b.Send(SubmitFrame()).ok() && a.Send(SubmitFrame()).ok());

  int more[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, more), 0);
  Channel c(more[0]);
  { Channel gone(more[1]); }
  Result<proto::Frame> closed = c.Receive();
  ASSERT_FALSE(closed.ok());
  EXPECT_EQ(closed.status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(c.Send(SubmitFrame()).ok()) << "a closed peer is an error, never SIGPIPE";
}

// Random bytes and mutations of valid frames: the decoder never crashes, and whatever it
// accepts re-encodes into a frame that decodes the same way.
TEST(IpcFrameTest, FuzzedStreamsNeverCrashTheDecoder) {
  // Strings that are not UTF-8 fail to parse (proto3), and protobuf logs each: not here.
  google::protobuf::LogSilencer quiet;
  std::mt19937 rng(20261202);
  const std::string valid = EncodeFrame(SubmitFrame());
  int accepted = 0;
  int refused = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes;
    if (round % 2 == 0) {
      bytes = valid;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
      if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    } else {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
      if (bytes.size() >= 4) bytes[3] = 0;  // plausible lengths, so the body gets parsed
      if (bytes.size() >= 4) bytes[2] = 0;
    }
    FrameDecoder decoder;
    decoder.Append(bytes);
    for (int i = 0; i < 8; ++i) {
      Result<std::optional<proto::Frame>> next = decoder.Next();
      if (!next.ok()) {
        ++refused;
        break;
      }
      if (!next->has_value()) break;
      ++accepted;
      ASSERT_NE((*next)->body_case(), proto::Frame::BODY_NOT_SET);
      FrameDecoder again;
      again.Append(EncodeFrame(**next));
      Result<std::optional<proto::Frame>> twice = again.Next();
      ASSERT_TRUE(twice.ok() && twice->has_value());
      EXPECT_EQ((*twice)->SerializeAsString(), (*next)->SerializeAsString());
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

}  // namespace
}  // namespace pier::ipc
