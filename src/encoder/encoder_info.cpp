#include "encoder/encoder_info.h"

namespace pier::encoder {

std::string_view PoolingName(Pooling pooling) {
  switch (pooling) {
    case Pooling::kNone:
      return "none";
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
  }
  return "?";
}

bool IsEncoderArchitecture(std::string_view architecture) { return architecture == "bert"; }

Result<EncoderInfo> ReadEncoderInfo(const model::GgufFile& file) {
  EncoderInfo info;
  PIER_ASSIGN_OR_RETURN(std::string_view arch, file.GetString("general.architecture"));
  if (!IsEncoderArchitecture(arch)) {
    return UnsupportedError(file.path() + ": general.architecture = '" + std::string(arch) +
                            "' is not an encoder Pier runs (bert)");
  }
  info.architecture = std::string(arch);
  if (file.Has("general.name")) {
    PIER_ASSIGN_OR_RETURN(std::string_view name, file.GetString("general.name"));
    info.name = std::string(name);
  }
  const std::string p = info.architecture + ".";
  auto positive = [&](const std::string& key, int64_t* out) -> Status {
    PIER_ASSIGN_OR_RETURN(*out, file.GetInt(key));
    if (*out <= 0) {
      return InvalidArgumentError(file.path() + ": " + key + " = " + std::to_string(*out) +
                                  " must be positive");
    }
    return Status::Ok();
  };
  PIER_RETURN_IF_ERROR(positive(p + "context_length", &info.context_length));
  PIER_RETURN_IF_ERROR(positive(p + "embedding_length", &info.embedding_length));
  PIER_RETURN_IF_ERROR(positive(p + "feed_forward_length", &info.feed_forward_length));
  PIER_RETURN_IF_ERROR(positive(p + "block_count", &info.block_count));
  PIER_RETURN_IF_ERROR(positive(p + "attention.head_count", &info.head_count));
  if (info.embedding_length % info.head_count != 0) {
    return InvalidArgumentError(
        file.path() + ": " + p + "embedding_length " + std::to_string(info.embedding_length) +
        " is not a multiple of the head count " + std::to_string(info.head_count));
  }
  info.head_dim = info.embedding_length / info.head_count;
  PIER_ASSIGN_OR_RETURN(info.layer_norm_eps, file.GetFloat(p + "attention.layer_norm_epsilon"));
  if (!(info.layer_norm_eps > 0)) {
    return InvalidArgumentError(file.path() + ": " + p +
                                "attention.layer_norm_epsilon must be > 0");
  }
  if (file.Has(p + "attention.causal")) {
    PIER_ASSIGN_OR_RETURN(bool causal, file.GetBool(p + "attention.causal"));
    if (causal) {
      return UnsupportedError(file.path() + ": " + p +
                              "attention.causal = true: a causal encoder is not supported");
    }
  }
  if (file.Has(p + "pooling_type")) {
    PIER_ASSIGN_OR_RETURN(int64_t pooling, file.GetInt(p + "pooling_type"));
    switch (pooling) {
      case 0:
        info.pooling = Pooling::kNone;
        break;
      case 1:
        info.pooling = Pooling::kMean;
        break;
      case 2:
        info.pooling = Pooling::kCls;
        break;
      case 3:
        info.pooling = Pooling::kLast;
        break;
      default:
        return UnsupportedError(file.path() + ": " + p +
                                "pooling_type = " + std::to_string(pooling) +
                                " is not supported (0 none, 1 mean, 2 cls, 3 last are)");
    }
  }
  if (const model::GgufTensorInfo* types = file.FindTensor("token_types.weight")) {
    info.token_type_count = types->row_count();
  }
  if (const model::GgufTensorInfo* embd = file.FindTensor("token_embd.weight")) {
    info.vocab_size = embd->row_count();
  }
  for (const model::GgufTensorInfo& t : file.tensors()) {
    info.parameter_count += t.element_count;
    info.weight_bytes += t.size_bytes;
    ++info.tensor_types[t.type];
  }
  return info;
}

}  // namespace pier::encoder
