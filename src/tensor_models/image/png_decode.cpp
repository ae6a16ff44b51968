// DecodePng: libpng's classic reader from memory into 8-bit RGB.
//
// Palette and grey images are expanded (low bit depths scaled to 8 bits as Pillow does),
// alpha and tRNS transparency dropped (Pillow's convert('RGB') ignores them too), 16-bit
// samples reduced to their high byte (Pillow's "RGB;16B" unpacking; not rounded), Adam7
// interlacing handled by libpng. libpng reports a fatal error through our error function,
// which copies the message and longjmps back to the one function that called setjmp (it holds
// no C++ object with a destructor). The probe's dimensions are libpng's limits, and a chunk
// may not make libpng allocate more than 8 MiB (a second line of defence behind the limits:
// an oversized ancillary chunk is dropped with a warning).
#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tensor_models/image/image_decoders.h"

namespace pier::tensor_models::image {
namespace {

constexpr png_alloc_size_t kChunkMallocMax = png_alloc_size_t{8} << 20;

struct PngJob {
  png_structp png;
  png_infop info;
  std::jmp_buf jump;
  char message[256];
  const uint8_t* data;
  size_t size;
  size_t at;
  RgbView out;
  bool size_mismatch;
};

[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof(job->message), "%s", message);
  std::longjmp(job->jump, 1);
}

void PngWarning(png_structp, png_const_charp) {}

void ReadBytes(png_structp png, png_bytep into, size_t length) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (length > job->size - job->at) png_error(png, "the file is cut short");
  std::memcpy(into, job->data + job->at, length);
  job->at += length;
}

// Runs libpng; false when it failed (job->message says why). Everything it touches lives in
// `job`, so nothing is clobbered by the longjmp.
bool RunLibpng(PngJob* job) {
  if (setjmp(job->jump) != 0) {
    png_destroy_read_struct(&job->png, job->info != nullptr ? &job->info : nullptr, nullptr);
    return false;
  }
  job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, PngError, PngWarning);
  if (job->png == nullptr) {
    std::snprintf(job->message, sizeof(job->message), "libpng could not start");
    return false;
  }
  job->info = png_create_info_struct(job->png);
  if (job->info == nullptr) png_error(job->png, "libpng could not start");
  png_set_user_limits(job->png, static_cast<uint32_t>(job->out.width),
                      static_cast<uint32_t>(job->out.height));
  png_set_chunk_malloc_max(job->png, kChunkMallocMax);
  png_set_read_fn(job->png, job, ReadBytes);
  png_read_info(job->png, job->info);

  const png_uint_32 width = png_get_image_width(job->png, job->info);
  const png_uint_32 height = png_get_image_height(job->png, job->info);
  if (static_cast<int64_t>(width) != job->out.width ||
      static_cast<int64_t>(height) != job->out.height) {
    job->size_mismatch = true;
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    return true;
  }
  const int color_type = png_get_color_type(job->png, job->info);
  const int bit_depth = png_get_bit_depth(job->png, job->info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(job->png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) {
    png_set_expand_gray_1_2_4_to_8(job->png);
  }
  if (bit_depth == 16) png_set_strip_16(job->png);
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(job->png);
  if ((color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(job->png);
  const int passes = png_set_interlace_handling(job->png);
  png_read_update_info(job->png, job->info);
  const size_t stride = static_cast<size_t>(width) * 3;
  if (png_get_rowbytes(job->png, job->info) != stride) {
    png_error(job->png, "the image does not reduce to 8-bit RGB");
  }
  // Interlaced: each pass fills its pixels of every row; after the last every pixel is set.
  for (int pass = 0; pass < passes; ++pass) {
    for (png_uint_32 y = 0; y < height; ++y) {
      png_read_row(job->png, job->out.pixels.data() + stride * y, nullptr);
    }
  }
  // The chunks after the pixels are not read: Pillow ignores their damage too.
  png_destroy_read_struct(&job->png, &job->info, nullptr);
  return true;
}

}  // namespace

Status DecodePng(std::string_view encoded, RgbView out) {
  PngJob job{};
  job.data = reinterpret_cast<const uint8_t*>(encoded.data());
  job.size = encoded.size();
  job.out = out;
  if (!RunLibpng(&job))
    return InvalidArgumentError(std::string("corrupt PNG image: ") + job.message);
  if (job.size_mismatch) {
    return InvalidArgumentError("corrupt PNG image: its header disagrees with the probe");
  }
  return Status::Ok();
}

}  // namespace pier::tensor_models::image
