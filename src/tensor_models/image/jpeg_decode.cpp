// DecodeJpeg: libjpeg-turbo (Debian's libjpeg62-turbo) from memory into 8-bit RGB.
//
// libjpeg reports a fatal error through error_exit, which must not return: ours formats the
// message and longjmps back to the one function that called setjmp, which holds no C++
// object with a destructor (the longjmp would skip it). libjpeg only warns when the data
// ends early (JWRN_JPEG_EOF) and fills the rest with grey; that warning is an error here.
// Other warnings (extraneous bytes, a corrupt restart marker) are ignored, as Pillow does.
#include <csetjmp>
#include <cstdint>
#include <cstdio>  // jpeglib.h needs FILE and size_t first
#include <string>

// jpeglib.h after <cstdio>; jerror.h (the message codes) after jpeglib.h.
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "tensor_models/image/image_decoders.h"

namespace pier::tensor_models::image {
namespace {

struct JpegJob {
  jpeg_decompress_struct cinfo;
  jpeg_error_mgr error_manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  const uint8_t* data;
  size_t size;
  RgbView out;
  bool size_mismatch;
  bool not_rgb;
};

JpegJob* JobOf(j_common_ptr cinfo) {
  // error_manager is the job's; cinfo->client_data points back at the job.
  return static_cast<JpegJob*>(cinfo->client_data);
}

[[noreturn]] void ErrorExit(j_common_ptr cinfo) {
  JpegJob* job = JobOf(cinfo);
  (*cinfo->err->format_message)(cinfo, job->message);
  std::longjmp(job->jump, 1);
}

void EmitMessage(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) ErrorExit(cinfo);
}

// Runs libjpeg; false when it failed (job->message says why). The only function that calls
// setjmp: everything it touches lives in `job`, so nothing is clobbered by the longjmp.
bool RunLibjpeg(JpegJob* job) {
  if (setjmp(job->jump) != 0) {
    jpeg_destroy_decompress(&job->cinfo);
    return false;
  }
  jpeg_create_decompress(&job->cinfo);
  jpeg_mem_src(&job->cinfo, job->data, static_cast<unsigned long>(job->size));
  jpeg_read_header(&job->cinfo, TRUE);
  if (static_cast<int64_t>(job->cinfo.image_width) != job->out.width ||
      static_cast<int64_t>(job->cinfo.image_height) != job->out.height) {
    job->size_mismatch = true;
    jpeg_destroy_decompress(&job->cinfo);
    return true;
  }
  job->cinfo.out_color_space = JCS_RGB;
  // A progressive file's coefficients (2 bytes a sample) are libjpeg's own allocation: capped
  // at what three full-size components need, so a hostile header cannot ask for more (past
  // the cap libjpeg wants a backing store, which this build lacks: an error, not a large
  // allocation).
  const uint64_t padded_pixels =
      (static_cast<uint64_t>(job->out.width) + 32) * (static_cast<uint64_t>(job->out.height) + 32);
  job->cinfo.mem->max_memory_to_use = static_cast<long>(padded_pixels * 6 + (uint64_t{16} << 20));
  jpeg_start_decompress(&job->cinfo);
  if (job->cinfo.output_components != 3 || job->cinfo.output_width != job->cinfo.image_width ||
      job->cinfo.output_height != job->cinfo.image_height) {
    job->not_rgb = true;
    jpeg_destroy_decompress(&job->cinfo);
    return true;
  }
  const size_t stride = static_cast<size_t>(job->out.width) * 3;
  while (job->cinfo.output_scanline < job->cinfo.output_height) {
    JSAMPROW row = job->out.pixels.data() + stride * job->cinfo.output_scanline;
    jpeg_read_scanlines(&job->cinfo, &row, 1);
  }
  // Every row is in; what follows the last scan (EOI, trailing bytes) is not read, as Pillow
  // does not.
  jpeg_destroy_decompress(&job->cinfo);
  return true;
}

}  // namespace

Status DecodeJpeg(std::string_view encoded, RgbView out) {
  JpegJob job{};
  job.cinfo.err = jpeg_std_error(&job.error_manager);
  job.cinfo.client_data = &job;  // jpeg_create_decompress keeps err and client_data
  job.error_manager.error_exit = ErrorExit;
  job.error_manager.emit_message = EmitMessage;
  job.data = reinterpret_cast<const uint8_t*>(encoded.data());
  job.size = encoded.size();
  job.out = out;
  if (!RunLibjpeg(&job)) {
    return InvalidArgumentError(std::string("corrupt JPEG image: ") + job.message);
  }
  if (job.size_mismatch) {
    return InvalidArgumentError("corrupt JPEG image: its frame header disagrees with the probe");
  }
  if (job.not_rgb) {
    return InvalidArgumentError("unsupported JPEG image: it does not decode to RGB");
  }
  return Status::Ok();
}

}  // namespace pier::tensor_models::image
