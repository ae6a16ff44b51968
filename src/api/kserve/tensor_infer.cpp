#include "api/kserve/tensor_infer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "api/kserve/kserve_api.h"
#include "api/kserve/tensor_json.h"
#include "serving/tensor_runner.h"
#include "tensor/float16.h"
#include "tensor_models/batch_tensors.h"

namespace pier::api {
namespace {

using tensor_models::AppendBytesElement;

// One element as a sortable value and as Triton writes it (std::to_string of the element's
// own type: integers as integers, floats with %f). long double holds every int64 and uint64.
struct Score {
  long double value;
  std::string text;
};

template <typename T>
T Load(const std::string& bytes, size_t i) {
  T v;
  std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
Score ScoreOf(T v) {
  return {static_cast<long double>(v), std::to_string(v)};
}

Score ScoreAt(const HostTensor& t, size_t i) {
  switch (t.type) {
    case ElementType::kUint8:
      return ScoreOf(static_cast<unsigned>(Load<uint8_t>(t.bytes, i)));
    case ElementType::kUint16:
      return ScoreOf(static_cast<unsigned>(Load<uint16_t>(t.bytes, i)));
    case ElementType::kUint32:
      return ScoreOf(Load<uint32_t>(t.bytes, i));
    case ElementType::kUint64:
      return ScoreOf(Load<uint64_t>(t.bytes, i));
    case ElementType::kInt8:
      return ScoreOf(static_cast<int>(Load<int8_t>(t.bytes, i)));
    case ElementType::kInt16:
      return ScoreOf(static_cast<int>(Load<int16_t>(t.bytes, i)));
    case ElementType::kInt32:
      return ScoreOf(Load<int32_t>(t.bytes, i));
    case ElementType::kInt64:
      return ScoreOf(Load<int64_t>(t.bytes, i));
    case ElementType::kFp16:
      return ScoreOf(Fp16ToFp32(Load<uint16_t>(t.bytes, i)));
    case ElementType::kBf16:
      return ScoreOf(Bf16ToFp32(Load<uint16_t>(t.bytes, i)));
    case ElementType::kFp32:
      return ScoreOf(Load<float>(t.bytes, i));
    case ElementType::kFp64:
      return ScoreOf(Load<double>(t.bytes, i));
    case ElementType::kBool:
    case ElementType::kBytes:
      break;
  }
  return {0, "0"};
}

bool Classifiable(ElementType type) {
  return type != ElementType::kBytes && type != ElementType::kBool;
}

}  // namespace

namespace {

// The rows of `output` and each row's classes, highest first (ties: the lower index first).
struct Ranked {
  int64_t rows = 0;
  int64_t kept = 0;
  std::vector<std::vector<std::pair<size_t, Score>>> best;  // [rows][kept]
};

Result<Ranked> Rank(const HostTensor& output, int64_t k, bool batched) {
  if (!Classifiable(output.type)) {
    return InvalidArgumentError("output '" + output.name + "' is " +
                                std::string(ElementTypeName(output.type)) +
                                ": classification takes numbers");
  }
  const int64_t total = ElementCount(output.shape);
  const int64_t rows = batched && !output.shape.empty() ? output.shape[0] : 1;
  if (total < 0 || rows <= 0 || total % rows != 0 ||
      static_cast<uint64_t>(total) * ElementSize(output.type) != output.bytes.size()) {
    return InternalError("output '" + output.name + "' of shape " + ShapeText(output.shape) +
                         " holds " + std::to_string(output.bytes.size()) + " bytes");
  }
  const int64_t per_row = total / rows;
  Ranked ranked;
  ranked.rows = rows;
  ranked.kept = std::min(k, per_row);
  std::vector<Score> scores(static_cast<size_t>(per_row));
  std::vector<size_t> order(scores.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < per_row; ++i) {
      scores[i] = ScoreAt(output, static_cast<size_t>(r * per_row + i));
    }
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&scores](size_t a, size_t b) { return scores[a].value > scores[b].value; });
    std::vector<std::pair<size_t, Score>> row;
    for (int64_t i = 0; i < ranked.kept; ++i) row.emplace_back(order[i], scores[order[i]]);
    ranked.best.push_back(std::move(row));
  }
  return ranked;
}

const std::string* LabelOf(const std::vector<std::string>* labels, size_t index) {
  return labels != nullptr && index < labels->size() ? &(*labels)[index] : nullptr;
}

}  // namespace

Result<HostTensor> ClassifyOutput(const HostTensor& output, int64_t k, bool batched,
                                  const std::vector<std::string>* labels) {
  PIER_ASSIGN_OR_RETURN(Ranked ranked, Rank(output, k, batched));
  HostTensor out;
  out.name = output.name;
  out.type = ElementType::kBytes;
  out.shape = batched && !output.shape.empty() ? std::vector<int64_t>{ranked.rows, ranked.kept}
                                               : std::vector<int64_t>{ranked.kept};
  for (const auto& row : ranked.best) {
    for (const auto& [index, score] : row) {
      std::string text = score.text + ":" + std::to_string(index);
      if (const std::string* label = LabelOf(labels, index)) text += ":" + *label;
      AppendBytesElement(out.bytes, text);
    }
  }
  return out;
}

Result<std::vector<std::vector<ClassScore>>> TopClasses(const HostTensor& output, int64_t k,
                                                        bool batched,
                                                        const std::vector<std::string>* labels) {
  PIER_ASSIGN_OR_RETURN(Ranked ranked, Rank(output, k, batched));
  std::vector<std::vector<ClassScore>> out;
  for (const auto& row : ranked.best) {
    std::vector<ClassScore> classes;
    for (const auto& [index, score] : row) {
      const std::string* label = LabelOf(labels, index);
      classes.push_back({static_cast<int64_t>(index), static_cast<double>(score.value),
                         label != nullptr ? *label : std::string()});
    }
    out.push_back(std::move(classes));
  }
  return out;
}

std::optional<TensorInferRefusal> StartTensorInfer(
    const serving::ServedModel& model, const Principal& principal, TensorInferRequest request,
    const serving::ClassQueueLimits& class_max_queue,
    std::shared_ptr<const std::atomic<bool>> cancelled,
    std::function<void(Result<TensorInferAnswer>)> done) {
  const serving::TensorModelInfo& info = model.tensors->info();
  const bool batched = info.max_batch_size > 0;
  // The outputs the answer holds, in its order: those asked, or every one of the model's.
  std::vector<TensorOutputRequest> outputs = request.outputs;
  if (outputs.empty()) {
    for (const TensorSpec& spec : info.outputs) outputs.push_back({spec.name});
  }
  for (const TensorOutputRequest& output : outputs) {
    if (output.classification == 0) continue;
    for (const TensorSpec& spec : info.outputs) {
      if (spec.name == output.name && !Classifiable(spec.type)) {
        return TensorInferRefusal{InvalidArgumentError(
            "model '" + model.id + "': output '" + output.name + "' is " +
            std::string(ElementTypeName(spec.type)) + ": classification takes numbers")};
      }
    }  // an unknown output is the runner's to refuse, with the others
  }

  const int priority = BatcherPriority(request.priority, principal.max_priority);
  const engine::Priority level = ClassOfBatcherPriority(priority);
  int64_t cost = 1;
  if (batched && !request.inputs.empty() && !request.inputs[0].shape.empty()) {
    cost = std::max<int64_t>(1, request.inputs[0].shape[0]);
  }
  std::shared_ptr<KeySlot> slot;
  if (std::optional<KeyRefusal> refused =
          AdmitKeyRequest(principal, level, cost, "input items", "inputs", &slot)) {
    return TensorInferRefusal{std::move(refused->status), refused->retry_after_s};
  }

  serving::TensorRequest submit;
  submit.inputs = std::move(request.inputs);
  for (const TensorOutputRequest& output : request.outputs) submit.outputs.push_back(output.name);
  submit.priority = priority;
  submit.deadline =
      serving::QueueDeadline(class_max_queue, level, std::chrono::steady_clock::now());
  submit.cancelled = std::move(cancelled);
  const bool binary_output = request.binary_output;
  // The key's slot is held until the outputs are ready.
  const std::map<std::string, std::vector<std::string>>& labels = info.labels;
  Status submitted = model.tensors->Submit(
      std::move(submit), [done = std::move(done), slot, outputs = std::move(outputs), binary_output,
                          batched, labels](serving::TensorResult result) {
        if (!result.status.ok()) {
          done(std::move(result.status));
          return;
        }
        if (result.outputs.size() != outputs.size()) {
          done(InternalError("the model gave " + std::to_string(result.outputs.size()) +
                             " outputs for the " + std::to_string(outputs.size()) + " asked"));
          return;
        }
        TensorInferAnswer answer;
        answer.decode_seconds = result.decode_seconds;
        answer.queue_seconds = result.queue_seconds;
        answer.compute_seconds = result.compute_seconds;
        answer.batch_size = result.batch_size;
        for (size_t i = 0; i < outputs.size(); ++i) {
          HostTensor& tensor = result.outputs[i];
          if (outputs[i].classification > 0) {
            auto named = labels.find(tensor.name);
            Result<HostTensor> classes =
                ClassifyOutput(tensor, outputs[i].classification, batched,
                               named == labels.end() ? nullptr : &named->second);
            if (!classes.ok()) {
              done(classes.status());
              return;
            }
            tensor = std::move(classes).value();
          }
          answer.outputs.push_back(std::move(tensor));
          answer.binary.push_back(outputs[i].binary.value_or(binary_output));
        }
        done(std::move(answer));
      });
  if (!submitted.ok()) {
    const bool full = submitted.code() == StatusCode::kResourceExhausted;
    return TensorInferRefusal{std::move(submitted),
                              full ? std::optional<int64_t>(1) : std::nullopt};
  }
  return std::nullopt;
}

}  // namespace pier::api
