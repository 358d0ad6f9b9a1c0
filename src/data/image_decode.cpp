// JPEG (libjpeg API of libjpeg-turbo) and PNG (libpng) decoding to 8-bit RGB HWC, turned upright
// for the EXIF orientation (exif.cpp) as Pillow's exif_transpose shows the picture. Both libraries
// report errors by longjmp; the functions holding setjmp keep no C++ objects with destructors
// alive across it. An ImageDecoder (one per thread) keeps its JPEG error manager between images;
// each image gets a fresh decompressor, so no table of one image is used for another.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <atomic>
#include <filesystem>

// jpeglib.h needs size_t and FILE declared first.
#include <jpeglib.h>
// jerror.h after jpeglib.h.
#include <jerror.h>
#include <png.h>

#include "hpcnet/data.h"
#include "hpcnet/video.h"
#include "src/data/internal.h"

namespace hpcnet::data {
namespace detail {
namespace {

std::atomic<int64_t> g_max_pixels{kDefaultMaxImagePixels};

// Whether a width x height header is over the pixel limit; if so, the reason into buf (no
// allocation: called in frames holding setjmp).
bool over_pixel_limit(uint64_t width, uint64_t height, char* buf, size_t buf_size) {
  const int64_t limit = g_max_pixels.load(std::memory_order_relaxed);
  const uint64_t pixels = width * height;  // both below 2^32: no overflow
  if (pixels <= static_cast<uint64_t>(limit)) return false;
  std::snprintf(buf, buf_size,
                "%llux%llu = %llu pixels is over --max-image-pixels %lld (a guard against "
                "decompression bombs; raise it if the image is genuine)",
                static_cast<unsigned long long>(width), static_cast<unsigned long long>(height),
                static_cast<unsigned long long>(pixels), static_cast<long long>(limit));
  return true;
}

// ---- JPEG -------------------------------------------------------------------------------------

struct JpegErr {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool truncated;
  bool too_large;  // message is over_pixel_limit()'s reason
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_emit_message(j_common_ptr cinfo, int level) {
  // Warnings are silent, except a premature end of data: PIL rejects truncated files too.
  auto* err = reinterpret_cast<JpegErr*>(cinfo->err);
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) {
    err->truncated = true;
    (*cinfo->err->format_message)(cinfo, err->message);
  }
}

// ---- PNG --------------------------------------------------------------------------------------

struct PngIo {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
  bool too_large;  // message is over_pixel_limit()'s reason
};

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->size - io->pos) png_error(png, "unexpected end of data (truncated file)");
  std::memcpy(out, io->data + io->pos, n);
  io->pos += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof(io->message), "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

// The orientation of a PNG's eXIf chunk (read before or after the image data, as Pillow reads
// it), 1 when there is none.
int png_orientation(png_structp png, png_infop info) {
  png_bytep exif = nullptr;
  png_uint_32 size = 0;
  if (png_get_eXIf_1(png, info, &size, &exif) == 0 || exif == nullptr) return 1;
  return exif_orientation(exif, size);
}

// Returns nullptr on success or the error text (in io->message); *orientation gets the EXIF
// orientation (not applied). index: a class mask, one byte per pixel holding the gray value or
// palette index (see ImageDecoder::decode_mask).
const char* decode_png(PngIo* io, std::vector<uint8_t>& pixels, int64_t* h, int64_t* w,
                       int* orientation, bool index = false) {
  *orientation = 1;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, io, png_on_error, png_on_warning);
  if (!png) return "out of memory";
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return "out of memory";
  }
  // Rows are read one by one; interlaced images take several passes over the same rows.
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return io->message;
  }
  png_set_read_fn(png, io, png_read_mem);
  // libpng's own size limit (1,000,000 x 1,000,000) is lifted: the pixel count below decides.
  png_set_user_limits(png, PNG_UINT_31_MAX, PNG_UINT_31_MAX);
  png_read_info(png, info);  // the chunks up to the first IDAT: no pixel buffer yet
  png_uint_32 width = png_get_image_width(png, info);
  png_uint_32 height = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if (over_pixel_limit(width, height, io->message, sizeof(io->message))) {
    io->too_large = true;
    png_destroy_read_struct(&png, &info, nullptr);
    return io->message;
  }
  if (index) {
    if (color != PNG_COLOR_TYPE_PALETTE && color != PNG_COLOR_TYPE_GRAY &&
        color != PNG_COLOR_TYPE_GRAY_ALPHA)
      png_error(png, "an RGB mask; save class masks as 8-bit gray or palette PNGs (value = class)");
    if (depth == 16) png_error(png, "a 16-bit mask; save class masks as 8-bit PNGs");
    if (depth < 8) png_set_packing(png);  // one byte per pixel, values unscaled
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    int passes = png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 1 || png_get_rowbytes(png, info) != size_t{width})
      png_error(png, "unsupported PNG mask layout");
    pixels.resize(size_t{width} * height);
    for (int pass = 0; pass < passes; ++pass)
      for (png_uint_32 y = 0; y < height; ++y)
        png_read_row(png, pixels.data() + size_t{y} * width, nullptr);
    png_read_end(png, info);  // the chunks after the image data (an eXIf may be there)
    *orientation = png_orientation(png, info);
    png_destroy_read_struct(&png, &info, nullptr);
    *h = height;
    *w = width;
    return nullptr;
  }
  if (depth == 16) png_set_strip_16(png);  // keep the high byte
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_rowbytes(png, info) != size_t{width} * 3)
    png_error(png, "unsupported PNG pixel layout");
  // resize() may throw bad_alloc: tolerable here only because no C++ object lives in this frame.
  pixels.resize(size_t{width} * height * 3);
  for (int pass = 0; pass < passes; ++pass)
    for (png_uint_32 y = 0; y < height; ++y)
      png_read_row(png, pixels.data() + size_t{y} * width * 3, nullptr);
  png_read_end(png, info);  // the chunks after the image data (an eXIf may be there)
  *orientation = png_orientation(png, info);
  png_destroy_read_struct(&png, &info, nullptr);
  *h = height;
  *w = width;
  return nullptr;
}

}  // namespace

struct ImageDecoder::Jpeg {
  jpeg_decompress_struct cinfo;
  JpegErr err;
};

ImageDecoder::ImageDecoder() : jpeg_(new Jpeg) {
  std::memset(&jpeg_->cinfo, 0, sizeof(jpeg_->cinfo));
  jpeg_->cinfo.err = jpeg_std_error(&jpeg_->err.mgr);
  jpeg_->err.mgr.error_exit = jpeg_error_exit;
  jpeg_->err.mgr.emit_message = jpeg_emit_message;
  jpeg_create_decompress(&jpeg_->cinfo);
}

ImageDecoder::~ImageDecoder() { jpeg_destroy_decompress(&jpeg_->cinfo); }

namespace {

// The orientation of the first APP1 "Exif" marker (Pillow reads the first one), 1 when none.
int jpeg_orientation(const jpeg_decompress_struct* cinfo) {
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m != nullptr; m = m->next)
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 &&
        std::memcmp(m->data, "Exif\0\0", 6) == 0)
      return exif_orientation(m->data, m->data_length);
  return 1;
}

// Returns nullptr on success or the error text; *orientation gets the EXIF orientation (not
// applied). Holds setjmp: no C++ objects in this frame.
const char* decode_jpeg(jpeg_decompress_struct* cinfo, JpegErr* err, const uint8_t* data,
                        size_t size, std::vector<uint8_t>* pixels, int64_t* h, int64_t* w,
                        int64_t min_side, int* orientation) {
  *orientation = 1;
  err->truncated = false;
  err->too_large = false;
  err->message[0] = '\0';
  if (setjmp(err->jump)) {
    jpeg_abort_decompress(cinfo);
    return err->message;
  }
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  // APP1 markers (EXIF, XMP: at most 64 KiB each) kept in libjpeg's pool for the orientation.
  jpeg_save_markers(cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(cinfo, TRUE);
  *orientation = jpeg_orientation(cinfo);
  // Before jpeg_start_decompress, which allocates the whole coefficient image of a progressive
  // JPEG (2 bytes per sample) and the output buffers.
  if (over_pixel_limit(cinfo->image_width, cinfo->image_height, err->message,
                       sizeof(err->message))) {
    err->too_large = true;
    jpeg_abort_decompress(cinfo);
    return err->message;
  }
  if (cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK) {
    std::snprintf(err->message, sizeof(err->message), "CMYK JPEG is not supported");
    jpeg_abort_decompress(cinfo);
    return err->message;
  }
  cinfo->out_color_space = JCS_RGB;
  if (min_side > 0) {
    // The smallest DCT scale n/8 of 1/8, 1/4, 1/2 and 1 whose output (ceil(side n / 8), as
    // libjpeg sizes it) keeps the shorter side at least min_side: the IDCT then computes only the
    // pixels needed. (libjpeg-turbo's other scales, 3/8 ... 7/8, run scalar IDCTs slower than its
    // SIMD 8x8 one: measured, a 7/8 decode of a 300 x 400 photograph cost more than a full one.)
    // An EXIF turn swaps the sides but keeps the shorter one: the upright image's scale is this.
    const uint64_t shorter = std::min(cinfo->image_width, cinfo->image_height);
    unsigned n = 1;
    while (n < 8 && (shorter * n + 7) / 8 < static_cast<uint64_t>(min_side)) n *= 2;
    cinfo->scale_num = n;
    cinfo->scale_denom = 8;
  }
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != 3) {
    std::snprintf(err->message, sizeof(err->message), "unsupported JPEG (%d components, %ux%u)",
                  cinfo->output_components, cinfo->output_width, cinfo->output_height);
    jpeg_abort_decompress(cinfo);
    return err->message;
  }
  const size_t stride = size_t{cinfo->output_width} * 3;
  pixels->resize(stride * cinfo->output_height);
  while (cinfo->output_scanline < cinfo->output_height) {
    // Up to rec_outbuf_height rows a call (the rows one iMCU row of upsampling produces).
    JSAMPROW rows[16];
    const int n = std::min<int>(std::max(cinfo->rec_outbuf_height, 1), 16);
    for (int k = 0; k < n; ++k)
      rows[k] = pixels->data() +
                size_t{std::min(cinfo->output_scanline + k, cinfo->output_height - 1)} * stride;
    jpeg_read_scanlines(cinfo, rows, static_cast<JDIMENSION>(n));
  }
  *h = cinfo->output_height;
  *w = cinfo->output_width;
  jpeg_finish_decompress(cinfo);
  if (err->truncated) return err->message;
  return nullptr;
}

}  // namespace

std::string ImageDecoder::decode(const uint8_t* data, size_t size, Image& out, int64_t min_side) {
  out.height = out.width = 0;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) {
    // A fresh decompressor per image (0.2 us): libjpeg keeps the quantization and Huffman tables
    // of earlier images (for abbreviated streams), so a JPEG lacking its own would be decoded
    // with those of whichever image this thread decoded before, where a fresh decoder refuses it
    // or uses the standard tables.
    jpeg_destroy_decompress(&jpeg_->cinfo);
    jpeg_create_decompress(&jpeg_->cinfo);
    int orientation = 1;
    const char* e = decode_jpeg(&jpeg_->cinfo, &jpeg_->err, data, size, &out.pixels, &out.height,
                                &out.width, min_side, &orientation);
    if (e && jpeg_->err.too_large) return e;
    if (e) return std::string("bad JPEG data (") + e + ")";
    orient_pixels(orientation, out.pixels, &out.height, &out.width, 3, turned_);
    return {};
  }
  if (size >= 8 && png_sig_cmp(data, 0, 8) == 0) {
    PngIo io{data, size, 0, {0}, false};
    int orientation = 1;
    const char* e = decode_png(&io, out.pixels, &out.height, &out.width, &orientation);
    if (e && io.too_large) return e;
    if (e) return std::string("bad PNG data (") + e + ")";
    orient_pixels(orientation, out.pixels, &out.height, &out.width, 3, turned_);
    return {};
  }
  if (size == 0) return "empty file";
  return "not a JPEG or PNG file";
}

std::string ImageDecoder::decode_mask(const uint8_t* data, size_t size,
                                      std::vector<uint8_t>& pixels, int64_t* height,
                                      int64_t* width) {
  *height = *width = 0;
  if (size >= 8 && png_sig_cmp(data, 0, 8) == 0) {
    PngIo io{data, size, 0, {0}, false};
    int orientation = 1;
    const char* e = decode_png(&io, pixels, height, width, &orientation, true);
    if (e && io.too_large) return e;
    if (e) return std::string("bad PNG mask (") + e + ")";
    orient_pixels(orientation, pixels, height, width, 1, turned_);
    return {};
  }
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8)
    return "a JPEG mask (lossy compression changes class values); save masks as PNG";
  if (size == 0) return "empty file";
  return "not a PNG file";
}

}  // namespace detail

void set_max_image_pixels(int64_t n) {
  HPCNET_REQUIRE(n >= 1, "--max-image-pixels must be at least 1 (got " + std::to_string(n) + ")");
  detail::g_max_pixels.store(n, std::memory_order_relaxed);
}

int64_t max_image_pixels() { return detail::g_max_pixels.load(std::memory_order_relaxed); }

Image decode_image(const uint8_t* data, size_t size, const std::string& name, int64_t min_side) {
  detail::ImageDecoder dec;
  Image img;
  std::string err = dec.decode(data, size, img, min_side);
  if (!err.empty())
    throw InputError("cannot decode image " + name + ": " + err + "; replace or remove the file");
  return img;
}

Image read_image_file(const std::string& path, int64_t min_side) {
  std::vector<uint8_t> bytes = detail::read_whole_file(path, "image");
  return decode_image(bytes.data(), bytes.size(), path, min_side);
}

std::vector<std::string> list_image_files(const std::string& path, bool with_videos) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    HPCNET_REQUIRE(fs::exists(path, ec), path + ": no such file or folder");
    return {path};
  }
  std::vector<std::string> files;
  fs::directory_iterator it(path, ec), end;
  while (!ec && it != end) {
    const std::string name = it->path().filename().string();
    std::error_code entry_ec;  // a dangling link is not a failure of the listing
    if (!name.empty() && name[0] != '.' &&
        (detail::is_image_name(name) || (with_videos && is_video_name(name))) &&
        (it->is_regular_file(entry_ec) || detail::is_broken_link(it->path().string())))
      files.push_back(it->path().string());  // a link leading nowhere: its read says so
    it.increment(ec);
  }
  HPCNET_REQUIRE(!ec, path + ": cannot list the folder (" + ec.message() + ")");
  HPCNET_REQUIRE(!files.empty(), path + ": the folder holds no .jpg, .jpeg or .png file" +
                                     std::string(with_videos ? " and no video" : ""));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace hpcnet::data
