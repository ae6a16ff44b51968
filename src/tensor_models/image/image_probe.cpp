// ProbeImage and CheckImageLimits: an image's format, dimensions and EXIF orientation read
// from its header alone (JPEG's markers up to the first scan, PNG's chunks), every read
// checked against the end of the bytes, so the limits refuse a huge image before a pixel is
// decoded.
#include <cstdint>
#include <string>
#include <string_view>

#include "tensor_models/image/image_preprocess.h"

namespace pier::tensor_models::image {
namespace {

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// The orientation tag (0x0112) of a TIFF structure's first IFD, as EXIF stores it (JPEG's
// APP1 after "Exif\0\0", PNG's eXIf); 1 when absent, malformed or outside 1..8 (Pillow's
// exif_transpose leaves such an image as stored).
int TiffOrientation(std::string_view tiff) {
  constexpr std::string_view kExifPrefix("Exif\0\0", 6);
  if (tiff.substr(0, kExifPrefix.size()) == kExifPrefix) tiff.remove_prefix(kExifPrefix.size());
  const auto* p = reinterpret_cast<const uint8_t*>(tiff.data());
  const size_t size = tiff.size();
  if (size < 8) return 1;
  bool little;
  if (p[0] == 'I' && p[1] == 'I' && p[2] == 42 && p[3] == 0) {
    little = true;
  } else if (p[0] == 'M' && p[1] == 'M' && p[2] == 0 && p[3] == 42) {
    little = false;
  } else {
    return 1;
  }
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? (p[at] | (p[at + 1] << 8)) : Be16(p + at);
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return little ? (uint32_t{p[at]} | (uint32_t{p[at + 1]} << 8) | (uint32_t{p[at + 2]} << 16) |
                     (uint32_t{p[at + 3]} << 24))
                  : Be32(p + at);
  };
  const uint64_t ifd = u32(4);
  if (ifd + 2 > size) return 1;
  const uint32_t entries = u16(ifd);
  for (uint32_t i = 0; i < entries; ++i) {
    const uint64_t entry = ifd + 2 + uint64_t{12} * i;
    if (entry + 12 > size) return 1;
    if (u16(entry) != 0x0112) continue;
    const uint32_t type = u16(entry + 2);
    if (u32(entry + 4) != 1) return 1;
    uint32_t value;
    if (type == 3) {  // SHORT
      value = u16(entry + 8);
    } else if (type == 4) {  // LONG
      value = u32(entry + 8);
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

Status CutShort(std::string_view what) {
  return InvalidArgumentError("corrupt " + std::string(what) + " image: the header is cut short");
}

// JPEG: the segments from SOI to the first SOS; the first SOFn gives the dimensions, the
// first APP1 "Exif" the orientation.
Result<ImageHeader> ProbeJpeg(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  ImageHeader header;
  header.format = ImageFormat::kJpeg;
  bool have_size = false;
  bool have_exif = false;
  size_t at = 2;  // past SOI
  while (true) {
    if (at >= size) break;
    if (p[at] != 0xFF)
      return InvalidArgumentError("corrupt JPEG image: no marker where one must be");
    while (at < size && p[at] == 0xFF) ++at;  // fill bytes
    if (at >= size) break;
    const uint8_t marker = p[at++];
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (marker == 0xD9) break;  // EOI before any scan
    if (at + 2 > size) break;
    const size_t length = Be16(p + at);
    if (length < 2 || at + length > size) break;
    const uint8_t* segment = p + at + 2;
    const size_t segment_size = length - 2;
    const bool sof =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (sof && !have_size) {
      if (segment_size < 6) break;
      header.height = Be16(segment + 1);
      header.width = Be16(segment + 3);
      have_size = true;
    } else if (marker == 0xE1 && !have_exif && segment_size >= 6 &&
               std::string_view(reinterpret_cast<const char*>(segment), 6) ==
                   std::string_view("Exif\0\0", 6)) {
      header.orientation =
          TiffOrientation(std::string_view(reinterpret_cast<const char*>(segment), segment_size));
      have_exif = true;
    } else if (marker == 0xDA) {
      break;  // the first scan: every header segment has been seen
    }
    at += length;
  }
  if (!have_size) return CutShort("JPEG");
  if (header.width == 0 || header.height == 0) {
    return InvalidArgumentError("corrupt JPEG image: zero dimensions (" +
                                std::to_string(header.width) + " x " +
                                std::to_string(header.height) + ")");
  }
  return header;
}

// PNG: IHDR first (the dimensions); eXIf wherever it is (Pillow reads it after the pixels
// too), found by walking the chunks' lengths.
Result<ImageHeader> ProbePng(std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t size = bytes.size();
  if (size < 8 + 8 + 13 || Be32(p + 8) != 13 || std::string_view(bytes.data() + 12, 4) != "IHDR") {
    return CutShort("PNG");
  }
  ImageHeader header;
  header.format = ImageFormat::kPng;
  header.width = Be32(p + 16);
  header.height = Be32(p + 20);
  if (header.width == 0 || header.height == 0) {
    return InvalidArgumentError("corrupt PNG image: zero dimensions (" +
                                std::to_string(header.width) + " x " +
                                std::to_string(header.height) + ")");
  }
  uint64_t at = 8;
  while (at + 8 <= size) {
    const uint64_t length = Be32(p + at);
    const std::string_view type(bytes.data() + at + 4, 4);
    if (at + 12 + length > size || type == "IEND") break;
    if (type == "eXIf") {
      header.orientation = TiffOrientation(bytes.substr(at + 8, length));
      break;
    }
    at += 12 + length;  // length, type, data, CRC
  }
  return header;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (size_t i = 0; i < bytes.size() && i < 8; ++i) {
    const auto byte = static_cast<uint8_t>(bytes[i]);
    if (i > 0) text += ' ';
    text += kDigits[byte >> 4];
    text += kDigits[byte & 15];
  }
  return text;
}

}  // namespace

Result<ImageHeader> ProbeImage(std::string_view encoded) {
  if (encoded.size() >= 3 && encoded.substr(0, 3) == "\xFF\xD8\xFF") return ProbeJpeg(encoded);
  if (encoded.size() >= 8 && encoded.substr(0, 8) == "\x89PNG\r\n\x1a\n") return ProbePng(encoded);
  return InvalidArgumentError("not a JPEG or PNG image (starts with " +
                              (encoded.empty() ? std::string("nothing") : Hex(encoded)) + ")");
}

Status CheckImageLimits(const ImageHeader& header, uint64_t encoded_bytes,
                        const ImageLimits& limits) {
  if (encoded_bytes > limits.max_bytes) {
    return InvalidArgumentError("image is " + std::to_string(encoded_bytes) +
                                " bytes; the limit is " + std::to_string(limits.max_bytes));
  }
  // Both dimensions are at most 2^32 (PNG's fields), so the product fits in 64 bits.
  const auto pixels = static_cast<uint64_t>(header.width) * static_cast<uint64_t>(header.height);
  if (header.width > limits.max_width || header.height > limits.max_height ||
      pixels > static_cast<uint64_t>(limits.max_pixels)) {
    return InvalidArgumentError("image is " + std::to_string(header.width) + " x " +
                                std::to_string(header.height) + " pixels; the limit is " +
                                std::to_string(limits.max_width) + " x " +
                                std::to_string(limits.max_height) + " and " +
                                std::to_string(limits.max_pixels) + " pixels");
  }
  return Status::Ok();
}

}  // namespace pier::tensor_models::image
