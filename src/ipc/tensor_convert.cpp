#include "ipc/tensor_convert.h"

#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "tensor_models/batch_tensors.h"

namespace pier::ipc {
namespace {

proto::Histogram ToProto(const Buckets& buckets) {
  proto::Histogram out;
  for (double b : buckets.bounds) out.add_bounds(b);
  for (uint64_t c : buckets.counts) out.add_counts(c);
  out.set_sum(buckets.sum);
  return out;
}

Buckets FromProto(const proto::Histogram& histogram) {
  Buckets out;
  out.bounds.assign(histogram.bounds().begin(), histogram.bounds().end());
  out.counts.assign(histogram.counts().begin(), histogram.counts().end());
  // A histogram whose counts do not match its bounds is read as empty, never indexed past.
  if (out.counts.size() != out.bounds.size() + 1) out.counts.assign(out.bounds.size() + 1, 0);
  out.sum = histogram.sum();
  return out;
}

Result<TensorSpec> SpecOf(const proto::Tensor& tensor) {
  std::optional<ElementType> type = ParseElementType(tensor.datatype());
  if (!type) {
    return InvalidArgumentError("tensor '" + tensor.name() + "': unknown datatype \"" +
                                tensor.datatype() + "\"");
  }
  TensorSpec spec{tensor.name(), *type, {tensor.shape().begin(), tensor.shape().end()}};
  for (int64_t dim : spec.shape) {
    if (dim < -1) {
      return InvalidArgumentError("tensor '" + tensor.name() + "': dimension " +
                                  std::to_string(dim));
    }
  }
  return spec;
}

void SpecToProto(const TensorSpec& spec, proto::Tensor* out) {
  out->Clear();
  out->set_name(spec.name);
  out->set_datatype(std::string(ElementTypeName(spec.type)));
  for (int64_t dim : spec.shape) out->add_shape(dim);
}

}  // namespace

void ToProto(const HostTensor& tensor, proto::Tensor* out) {
  SpecToProto(TensorSpec{tensor.name, tensor.type, tensor.shape}, out);
  out->set_data(tensor.bytes);
}

Result<HostTensor> FromProto(const proto::Tensor& tensor) {
  PIER_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(tensor));
  const int64_t count = ElementCount(spec.shape);
  if (count < 0) {
    return InvalidArgumentError("tensor '" + tensor.name() + "': shape " + ShapeText(spec.shape) +
                                " is not a tensor's");
  }
  if (spec.type == ElementType::kBytes) {
    if (Result<std::vector<size_t>> elements =
            tensor_models::BytesElementOffsets(tensor.data(), count);
        !elements.ok()) {
      return InvalidArgumentError("tensor '" + tensor.name() + "': " + elements.status().message());
    }
  } else if (static_cast<uint64_t>(count) > std::numeric_limits<uint64_t>::max() /
                                                static_cast<uint64_t>(ElementSize(spec.type)) ||
             static_cast<uint64_t>(tensor.data().size()) !=
                 static_cast<uint64_t>(count) * static_cast<uint64_t>(ElementSize(spec.type))) {
    return InvalidArgumentError("tensor '" + tensor.name() +
                                "': " + std::to_string(tensor.data().size()) + " bytes for shape " +
                                ShapeText(spec.shape));
  }
  return HostTensor{std::move(spec.name), spec.type, std::move(spec.shape), tensor.data()};
}

void ToProto(const tensor_models::TensorModelInfo& info, proto::TensorModel* out) {
  out->Clear();
  for (const TensorSpec& spec : info.inputs) SpecToProto(spec, out->add_inputs());
  for (const TensorSpec& spec : info.outputs) SpecToProto(spec, out->add_outputs());
  out->set_max_batch_size(info.max_batch_size);
  for (int64_t size : info.preferred_batch_sizes) out->add_preferred_batch_sizes(size);
  out->set_opset(info.opset);
  out->set_producer(info.producer);
  out->set_parameter_bytes(info.parameter_bytes);
}

Result<tensor_models::TensorModelInfo> FromProto(const proto::TensorModel& model) {
  tensor_models::TensorModelInfo info;
  for (const proto::Tensor& t : model.inputs()) {
    PIER_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(t));
    info.inputs.push_back(std::move(spec));
  }
  for (const proto::Tensor& t : model.outputs()) {
    PIER_ASSIGN_OR_RETURN(TensorSpec spec, SpecOf(t));
    info.outputs.push_back(std::move(spec));
  }
  if (info.inputs.empty() || info.outputs.empty() || model.max_batch_size() < 0) {
    return InvalidArgumentError("a tensor model needs inputs, outputs and a batch size >= 0");
  }
  info.max_batch_size = model.max_batch_size();
  info.preferred_batch_sizes.assign(model.preferred_batch_sizes().begin(),
                                    model.preferred_batch_sizes().end());
  for (int64_t size : info.preferred_batch_sizes) {
    if (size < 1 || size > info.max_batch_size) {
      return InvalidArgumentError("preferred batch size " + std::to_string(size) +
                                  " outside 1..max_batch_size " +
                                  std::to_string(info.max_batch_size));
    }
  }
  info.opset = model.opset();
  info.producer = model.producer();
  info.parameter_bytes = model.parameter_bytes();
  return info;
}

void ToProto(const tensor_models::TensorRunnerStats& stats, proto::TensorStats* out) {
  out->Clear();
  out->set_queued_items(stats.queued_items);
  out->set_running_items(stats.running_items);
  out->set_batches(stats.batches);
  out->set_items(stats.items);
  out->set_requests(stats.requests);
  out->set_expired(stats.expired);
  out->set_cancelled(stats.cancelled);
  out->set_window_seconds(stats.window_seconds);
  *out->mutable_batch_items() = ToProto(stats.batch_items);
  *out->mutable_queue_seconds() = ToProto(stats.queue_seconds);
  *out->mutable_compute_seconds() = ToProto(stats.compute_seconds);
}

tensor_models::TensorRunnerStats FromProto(const proto::TensorStats& stats) {
  tensor_models::TensorRunnerStats out;
  out.queued_items = stats.queued_items();
  out.running_items = stats.running_items();
  out.batches = stats.batches();
  out.items = stats.items();
  out.requests = stats.requests();
  out.expired = stats.expired();
  out.cancelled = stats.cancelled();
  out.window_seconds = stats.window_seconds();
  out.batch_items = FromProto(stats.batch_items());
  out.queue_seconds = FromProto(stats.queue_seconds());
  out.compute_seconds = FromProto(stats.compute_seconds());
  return out;
}

void ToProto(const tensor_models::TensorResult& result, uint64_t id, proto::TensorResult* out) {
  out->Clear();
  out->set_id(id);
  out->set_code(static_cast<int32_t>(result.status.code()));
  out->set_message(result.status.message());
  for (const HostTensor& t : result.outputs) ToProto(t, out->add_outputs());
  out->set_batch_size(result.batch_size);
  out->set_queue_seconds(result.queue_seconds);
  out->set_compute_seconds(result.compute_seconds);
}

tensor_models::TensorResult FromProto(const proto::TensorResult& result) {
  tensor_models::TensorResult out;
  if (result.code() < 0 || result.code() > static_cast<int32_t>(StatusCode::kInternal)) {
    out.status = InternalError("worker answered with unknown status code " +
                               std::to_string(result.code()) + ": " + result.message());
    return out;
  }
  if (result.code() != 0) {
    out.status = Status(static_cast<StatusCode>(result.code()), result.message());
    return out;
  }
  for (const proto::Tensor& t : result.outputs()) {
    Result<HostTensor> tensor = FromProto(t);
    if (!tensor.ok()) {
      out.status = InternalError("the worker sent a bad output: " + tensor.status().message());
      out.outputs.clear();
      return out;
    }
    out.outputs.push_back(std::move(tensor).value());
  }
  out.batch_size = result.batch_size();
  out.queue_seconds = result.queue_seconds();
  out.compute_seconds = result.compute_seconds();
  return out;
}

}  // namespace pier::ipc
