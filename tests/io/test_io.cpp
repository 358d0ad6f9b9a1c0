// Tests for src/io: safetensors round trips and byte layout (against bytes written by hand, so the
// format is checked against the spec, not only against our own reader), every corruption the
// reader must refuse, atomic writes that survive a failing writer, and the JSON Lines metrics log.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hpcnet/io.h"
#include "test_util.h"

namespace fs = std::filesystem;
using hpcnet::DType;
using hpcnet::Tensor;
using namespace hpcnet::test_util;

namespace {

// A fresh folder per test, removed afterwards.
class IoTest : public ::testing::Test {
 protected:
  std::string file(const std::string& name) const { return dir_.str(name); }
  std::vector<std::string> listing() const { return files_in(dir_.path()); }
  TempDir dir_{"io"};
};

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file assembled by hand: length, header padded with spaces to 8, data.
std::string st_bytes(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

template <class T>
std::string raw(std::initializer_list<T> values) {
  std::string s;
  for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return s;
}

Tensor iota(const hpcnet::Shape& shape, DType dtype, double start = 0.5) {
  Tensor t = Tensor::empty(shape, dtype);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  if (!v.empty()) t.copy_(Tensor::from_vector_f64(v, shape));
  return t;
}

// ---- safetensors: format ----

using IoSafetensors = IoTest;

TEST_F(IoSafetensors, WritesTheSpecifiedBytes) {
  // Expected file, written by hand from the format description.
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                             R"("b":{"dtype":"U8","shape":[1,3],"data_offsets":[16,19]}})";
  std::string expected = le64(header.size() + (8 - header.size() % 8) % 8) + header;
  expected.append((8 - header.size() % 8) % 8, ' ');
  // 1.0f = 0x3f800000, -2.0f = 0xc0000000, little-endian; int64 7; bytes 1 2 255.
  expected += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  expected += std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);
  expected += std::string("\x01\x02\xff", 3);

  Tensor b = Tensor::empty({1, 3}, DType::kUInt8);
  b.data<uint8_t>()[0] = 1;
  b.data<uint8_t>()[1] = 2;
  b.data<uint8_t>()[2] = 255;
  Tensor n = Tensor::empty({}, DType::kInt64);
  n.data<int64_t>()[0] = 7;
  hpcnet::save_safetensors(file("a.safetensors"),
                           {{"w", Tensor::from_vector({1.0f, -2.0f}, {2})}, {"n", n}, {"b", b}},
                           {{"format", "pt"}});
  const std::string got = read_file(file("a.safetensors"));
  EXPECT_EQ(got.size() % 8, 3u);  // 8 + padded header + 19 data bytes
  EXPECT_EQ((got.size() - 19) % 8, 0u) << "data must start 8-byte aligned";
  EXPECT_EQ(got, expected);
}

TEST_F(IoSafetensors, ReadsHandWrittenFile) {
  // Keys in another order, whitespace, no padding, no metadata, data order b then a.
  const std::string header =
      R"({ "a" : {"shape": [2, 2], "dtype": "F64", "data_offsets": [4, 36]},
           "b": {"data_offsets": [0, 4], "dtype": "I32", "shape": [1]} })";
  const std::string data = raw<int32_t>({-5}) + raw<double>({1.5, -2.25, 1e300, 0.0});
  write_file(file("h.safetensors"), st_bytes(header, data, /*pad=*/false));
  auto f = hpcnet::load_safetensors(file("h.safetensors"));
  EXPECT_EQ(f.order, (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(f.metadata.empty());
  ASSERT_EQ(f.at("a").dtype(), DType::kFloat64);
  EXPECT_EQ(f.at("a").shape(), (hpcnet::Shape{2, 2}));
  EXPECT_EQ(f.at("a").to_vector_f64(), (std::vector<double>{1.5, -2.25, 1e300, 0.0}));
  ASSERT_EQ(f.at("b").dtype(), DType::kInt32);
  EXPECT_EQ(f.at("b").data<int32_t>()[0], -5);
  EXPECT_TRUE(f.contains("a"));
  EXPECT_FALSE(f.contains("c"));
  EXPECT_THROW(f.at("c"), hpcnet::InputError);
}

TEST_F(IoSafetensors, RoundTripsDtypesShapesAndMetadata) {
  std::vector<std::pair<std::string, Tensor>> ts;
  ts.emplace_back("conv1.weight", iota({6, 3, 5, 5}, DType::kFloat32));
  ts.emplace_back("f64", iota({3, 4}, DType::kFloat64, -3.25));
  ts.emplace_back("bf16", iota({5}, DType::kBFloat16));
  ts.emplace_back("f16", iota({2, 3}, DType::kFloat16, -1.0));
  ts.emplace_back("labels", Tensor::from_labels({3, -1, 9, 1LL << 40}));
  ts.emplace_back("i32", iota({2, 1, 2}, DType::kInt32, -2));
  ts.emplace_back("u8", iota({7}, DType::kUInt8, 0));
  ts.emplace_back("scalar", Tensor::full({}, 3.5, DType::kFloat32));
  ts.emplace_back("empty", Tensor::empty({0, 3}, DType::kFloat32));
  ts.emplace_back("empty2", Tensor::empty({4, 0}, DType::kInt64));
  ts.emplace_back("fc3.bias", iota({10}, DType::kFloat32));
  // A transposed (non-contiguous) view is written as its contiguous copy.
  Tensor base = iota({2, 3}, DType::kFloat32);
  Tensor tr = base.detach();
  tr.impl()->shape = {3, 2};
  tr.impl()->strides = {1, 3};
  ASSERT_FALSE(tr.is_contiguous());
  ts.emplace_back("transposed", tr);
  const std::map<std::string, std::string> meta = {
      {"epoch", "2"}, {"note", "quotes \" and \\ and\nnewline, ünïcødé"}, {"empty", ""}};

  hpcnet::save_safetensors(file("m.safetensors"), ts, meta);
  auto f = hpcnet::load_safetensors(file("m.safetensors"));
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.order.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    EXPECT_EQ(f.order[i], ts[i].first) << "data must keep the given order";
    const Tensor& got = f.at(ts[i].first);
    EXPECT_TRUE(got.is_contiguous());
    EXPECT_TRUE(same_bytes(got, ts[i].second)) << ts[i].first;
  }
  EXPECT_EQ(f.at("transposed").to_vector(), (std::vector<float>{0.5, 3.5, 1.5, 4.5, 2.5, 5.5}));
  EXPECT_EQ(f.at("bf16").to_vector(), (std::vector<float>{0.5, 1.5, 2.5, 3.5, 4.5}));
  EXPECT_EQ(f.at("labels").data<int64_t>()[3], 1LL << 40);

  // Saving again over the file replaces it, and no metadata means no __metadata__ entry.
  hpcnet::save_safetensors(file("m.safetensors"), {{"x", iota({2}, DType::kFloat32)}});
  const std::string bytes = read_file(file("m.safetensors"));
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  auto g = hpcnet::load_safetensors(file("m.safetensors"));
  EXPECT_EQ(g.order, (std::vector<std::string>{"x"}));
  EXPECT_EQ(listing(), (std::vector<std::string>{"m.safetensors"}));
}

TEST_F(IoSafetensors, EmptyFileHasNoTensors) {
  hpcnet::save_safetensors(file("e.safetensors"), {});
  EXPECT_EQ(read_file(file("e.safetensors")), le64(8) + "{}      ");
  auto f = hpcnet::load_safetensors(file("e.safetensors"));
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.order.empty());
}

TEST_F(IoSafetensors, RefusesBadArguments) {
  Tensor t = iota({2}, DType::kFloat32);
  EXPECT_THROW(hpcnet::save_safetensors(file("x"), {{"a", t}, {"a", t}}), hpcnet::Error);
  EXPECT_THROW(hpcnet::save_safetensors(file("x"), {{"__metadata__", t}}), hpcnet::Error);
  EXPECT_THROW(hpcnet::save_safetensors(file("x"), {{"a", Tensor()}}), hpcnet::Error);
  EXPECT_THROW(hpcnet::save_safetensors(file("x"), {{"a", t}}, {{"k", "\xff\xfe"}}),
               hpcnet::InputError);
  EXPECT_THROW(hpcnet::save_safetensors(file("no/such/folder/x.safetensors"), {{"a", t}}),
               hpcnet::InputError);
  EXPECT_TRUE(listing().empty());
}

// ---- safetensors: corruption ----

struct Corrupt {
  const char* what;
  std::string bytes;
  const char* message_part;  // must appear in the error message
};

TEST_F(IoSafetensors, RefusesEveryCorruption) {
  const std::string good_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data8 = raw<float>({1.0f, 2.0f});
  auto one = [&](const std::string& entry) {  // a header with a single tensor "a"
    return st_bytes(R"({"a":)" + entry + "}", data8);
  };
  const std::string good = st_bytes(good_header, data8);
  std::vector<Corrupt> cases = {
      {"empty file", "", "not a safetensors file"},
      {"shorter than the length", "abc", "not a safetensors file"},
      {"text file", "hello world, this is not a tensor file\n", "not a safetensors file"},
      {"huge header length", le64(1ULL << 60) + "{}", "implausible"},
      {"header longer than the file", le64(4096) + good_header, "truncated"},
      {"header not an object", st_bytes("[1, 2]", ""), "not a safetensors file"},
      {"header not JSON", st_bytes(R"({"a": {"dtype": )", ""), "not valid JSON"},
      {"header with garbage after", st_bytes(good_header + "xx", data8), "not valid JSON"},
      {"header with NUL padding",
       le64(good_header.size() + 3) + good_header + std::string(3, '\0') + data8, "not valid JSON"},
      {"duplicate name",
       st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                data8),
       "twice"},
      {"entry not an object", one("[0, 8]"), "not a JSON object"},
      {"no dtype", one(R"({"shape":[2],"data_offsets":[0,8]})"), "no \"dtype\""},
      {"no shape", one(R"({"dtype":"F32","data_offsets":[0,8]})"), "no \"shape\""},
      {"no offsets", one(R"({"dtype":"F32","shape":[2]})"), "no \"data_offsets\""},
      {"unknown dtype", one(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"),
       "dtype 'F8_E4M3'"},
      {"lower-case dtype", one(R"({"dtype":"f32","shape":[2],"data_offsets":[0,8]})"),
       "dtype 'f32'"},
      {"dtype not a string", one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"),
       "not a string"},
      {"shape not a list", one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), "not a list"},
      {"negative dimension", one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
       "non-negative integer"},
      {"fractional dimension", one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
       "non-negative integer"},
      {"overflowing shape",
       one(R"({"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
       "impossibly large"},
      {"offsets not a pair", one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4,8]})"),
       "not [begin, end]"},
      {"negative offset", one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"),
       "non-negative integer"},
      {"begin after end", one(R"({"dtype":"F32","shape":[0],"data_offsets":[8,0]})"),
       "begin is after its end"},
      {"shape disagrees with offsets", one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
       "12 bytes"},
      {"dtype disagrees with offsets", one(R"({"dtype":"F64","shape":[2],"data_offsets":[0,8]})"),
       "16 bytes"},
      {"offsets outside the data", one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"),
       "tensor 'a' has offsets outside the data (bytes [8, 16), data is 8 bytes)"},
      {"truncated data", good.substr(0, good.size() - 3),
       "truncated: header says 8 bytes of data, file has 5"},
      {"trailing bytes", good + "junk", "4 bytes after the last tensor"},
      {"overlapping tensors",
       st_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                data8),
       "overlap"},
      {"gap between tensors",
       st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                data8),
       "2 unused bytes before tensor 'b'"},
      {"metadata not an object", st_bytes(R"({"__metadata__":["x"]})", ""), "__metadata__"},
      {"metadata value not a string", st_bytes(R"({"__metadata__":{"epoch":2}})", ""),
       "not a string"},
  };
  for (const Corrupt& c : cases) {
    const std::string path = file("bad.safetensors");
    write_file(path, c.bytes);
    try {
      hpcnet::load_safetensors(path);
      ADD_FAILURE() << c.what << ": loaded without an error";
    } catch (const hpcnet::InputError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u)
          << c.what << ": message must start with the path: " << msg;
      EXPECT_NE(msg.find(c.message_part), std::string::npos)
          << c.what << ": expected '" << c.message_part << "' in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what << ": message must be one line";
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.what << ": threw something other than InputError: " << e.what();
    }
  }
  // Sanity: the uncorrupted file loads.
  write_file(file("good.safetensors"), good);
  EXPECT_EQ(hpcnet::load_safetensors(file("good.safetensors")).at("a").to_vector(),
            (std::vector<float>{1.0f, 2.0f}));
}

TEST_F(IoSafetensors, MissingFileIsInputError) {
  try {
    hpcnet::load_safetensors(file("nope.safetensors"));
    FAIL() << "no error";
  } catch (const hpcnet::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.safetensors: cannot open"), std::string::npos)
        << e.what();
  }
}

// ---- atomic writes ----

using IoAtomicFile = IoTest;

TEST_F(IoAtomicFile, ReplacesTheFile) {
  hpcnet::write_file_atomic(file("f.txt"), std::string_view("first version, long"));
  EXPECT_EQ(read_file(file("f.txt")), "first version, long");
  hpcnet::write_file_atomic(file("f.txt"), [](std::ostream& os) { os << "second"; });
  EXPECT_EQ(read_file(file("f.txt")), "second");
  EXPECT_EQ(listing(), (std::vector<std::string>{"f.txt"}));
}

TEST_F(IoAtomicFile, FailingWriterLeavesOldFileAndNoTemp) {
  hpcnet::write_file_atomic(file("ckpt"), std::string_view("old contents"));
  const std::string big(3 << 20, 'x');  // past the 1 MiB buffer, so bytes reach the temp file
  auto failing = [&](std::ostream& os) {
    os << big;
    os.flush();
    bool temp_seen = false;  // the bytes go to "<path>.tmp.<pid>" beside the target
    for (const auto& name : listing())
      temp_seen |= name.ends_with(".tmp." + std::to_string(::getpid()));
    EXPECT_TRUE(temp_seen);
    throw std::runtime_error("simulated crash in the writer");
  };
  EXPECT_THROW(hpcnet::write_file_atomic(file("ckpt"), failing), std::runtime_error);
  EXPECT_EQ(read_file(file("ckpt")), "old contents");
  EXPECT_EQ(listing(), (std::vector<std::string>{"ckpt"}));

  // The same when there was no file before: nothing is left behind.
  EXPECT_THROW(hpcnet::write_file_atomic(file("fresh"), failing), std::runtime_error);
  EXPECT_EQ(listing(), (std::vector<std::string>{"ckpt"}));
}

TEST_F(IoAtomicFile, LargeAndMixedWrites) {
  std::string expected;
  auto writer = [&](std::ostream& os) {
    for (int i = 0; i < 5; ++i) {
      std::string chunk(static_cast<size_t>(1 + i * 700000), static_cast<char>('a' + i));
      os.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
      os.put('\n');
      os << i;
    }
  };
  {
    std::ostringstream ref;
    writer(ref);
    expected = ref.str();
  }
  hpcnet::write_file_atomic(file("big"), writer);
  EXPECT_EQ(read_file(file("big")), expected);
}

TEST_F(IoAtomicFile, KeepsPermissionBits) {
  hpcnet::write_file_atomic(file("p"), std::string_view("a"));
  ASSERT_EQ(::chmod(file("p").c_str(), 0600), 0);
  hpcnet::write_file_atomic(file("p"), std::string_view("b"));
  struct stat st;
  ASSERT_EQ(::stat(file("p").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(IoAtomicFile, MissingFolderIsInputError) {
  EXPECT_THROW(hpcnet::write_file_atomic(file("missing/x"), std::string_view("a")),
               hpcnet::InputError);
  fs::create_directories(file("sub"));
  EXPECT_THROW(hpcnet::write_file_atomic(file("sub"), std::string_view("a")), hpcnet::InputError);
  EXPECT_THROW(hpcnet::load_safetensors(file("sub")), hpcnet::InputError);
  EXPECT_EQ(listing(), (std::vector<std::string>{"sub"}));
}

TEST_F(IoAtomicFile, SaveSafetensorsKeepsOldCheckpointOnError) {
  const std::string path = file("model.safetensors");
  hpcnet::save_safetensors(path, {{"w", iota({3}, DType::kFloat32)}});
  const std::string before = read_file(path);
  Tensor t = iota({2}, DType::kFloat32);
  EXPECT_THROW(hpcnet::save_safetensors(path, {{"a", t}, {"a", t}}), hpcnet::Error);
  EXPECT_EQ(read_file(path), before);
  EXPECT_EQ(listing(), (std::vector<std::string>{"model.safetensors"}));
}

// ---- metrics log ----

using IoMetricsLog = IoTest;

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST_F(IoMetricsLog, LinesParseBack) {
  const std::string path = file("metrics.jsonl");
  {
    hpcnet::MetricsLog log(path, /*append=*/false);
    EXPECT_EQ(log.path(), path);
    log.write({{"step", 1}, {"loss", 2.302585}, {"phase", "train"}});
    // Flushed per line: readable while the log is still open.
    EXPECT_EQ(read_lines(path).size(), 1u);
    log.write({{"step", 2}, {"loss", std::nan("")}, {"note", "two\nlines"}});
    log.write({{"epoch", 1}, {"acc", 0.5}, {"per_class", {0.1, 0.2}}});
    EXPECT_THROW(log.write(nlohmann::json::array({1, 2})), hpcnet::Error);
  }
  auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["step"], 1);
  EXPECT_DOUBLE_EQ(lines[0]["loss"].get<double>(), 2.302585);
  EXPECT_EQ(lines[0]["phase"], "train");
  EXPECT_TRUE(lines[1]["loss"].is_null()) << "NaN is written as null";
  EXPECT_EQ(lines[1]["note"], "two\nlines");
  EXPECT_EQ(lines[2]["per_class"], nlohmann::json({0.1, 0.2}));

  {  // append keeps old lines; a fresh log truncates
    hpcnet::MetricsLog log(path, /*append=*/true);
    log.write({{"step", 3}});
  }
  EXPECT_EQ(read_lines(path).size(), 4u);
  {
    hpcnet::MetricsLog log(path, /*append=*/false);
    log.write({{"step", 1}});
  }
  EXPECT_EQ(read_lines(path).size(), 1u);
}

TEST_F(IoMetricsLog, AppendAfterCutLineStartsNewLine) {
  const std::string path = file("m.jsonl");
  write_file(path, "{\"step\":1}\n{\"step\":2,\"lo");  // a crash mid-record
  {
    hpcnet::MetricsLog log(path, /*append=*/true);
    log.write({{"step", 3}, {"bad_utf8", "\xff"}});
  }
  std::vector<std::string> lines = split_lines(read_file(path));
  ASSERT_EQ(lines.size(), 3u);
  auto rec = nlohmann::json::parse(lines[2]);
  EXPECT_EQ(rec["step"], 3);
  EXPECT_EQ(rec["bad_utf8"], "\xEF\xBF\xBD");  // U+FFFD
}

TEST_F(IoMetricsLog, MissingFolderIsInputError) {
  EXPECT_THROW(hpcnet::MetricsLog(file("no/such/m.jsonl"), false), hpcnet::InputError);
}

// ---- golden fixtures (tests/golden, written by make_golden.py with PyTorch) ----

#ifdef HPCNET_SOURCE_DIR
std::string golden(const std::string& name) {
  return std::string(HPCNET_SOURCE_DIR) + "/tests/golden/" + name;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// Mean cross-entropy of (N, C) logits against labels, in double.
double cross_entropy(const Tensor& logits, const Tensor& labels) {
  const int64_t n = logits.size(0), c = logits.size(1);
  std::vector<double> x = logits.to_vector_f64();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = x[i * c];
    for (int64_t j = 1; j < c; ++j) mx = std::max(mx, x[i * c + j]);
    double se = 0;
    for (int64_t j = 0; j < c; ++j) se += std::exp(x[i * c + j] - mx);
    total += mx + std::log(se) - x[i * c + labels.data<int64_t>()[i]];
  }
  return total / static_cast<double>(n);
}

TEST(IoGolden, LenetFixtureLoadsWithExpectedEntries) {
  const auto f = hpcnet::load_safetensors(golden("lenet_golden.safetensors"));
  const std::vector<std::pair<std::string, hpcnet::Shape>> params = {
      {"conv1.weight", {6, 3, 5, 5}},  {"conv1.bias", {6}},
      {"conv2.weight", {16, 6, 5, 5}}, {"conv2.bias", {16}},
      {"fc1.weight", {120, 400}},      {"fc1.bias", {120}},
      {"fc2.weight", {84, 120}},       {"fc2.bias", {84}},
      {"fc3.weight", {10, 84}},        {"fc3.bias", {10}}};
  for (const char* prefix : {"init.", "grad.", "sgd.", "sgd_wd.", "sgd_nesterov."})
    for (const auto& [name, shape] : params) {
      const Tensor& t = f.at(prefix + name);
      EXPECT_EQ(t.dtype(), DType::kFloat32) << prefix << name;
      EXPECT_EQ(t.shape(), shape) << prefix << name;
    }
  EXPECT_EQ(f.at("inputs").shape(), (hpcnet::Shape{4, 3, 32, 32}));
  EXPECT_EQ(f.at("labels").dtype(), DType::kInt64);
  EXPECT_EQ(f.at("logits").shape(), (hpcnet::Shape{4, 10}));
  EXPECT_EQ(f.at("step_inputs").dtype(), DType::kFloat16);
  EXPECT_EQ(f.at("step_inputs").shape(), (hpcnet::Shape{10, 2, 3, 32, 32}));
  EXPECT_EQ(f.at("step_labels").shape(), (hpcnet::Shape{10, 2}));
  for (const char* l : {"sgd_losses", "sgd_wd_losses", "sgd_nesterov_losses"})
    EXPECT_EQ(f.at(l).shape(), (hpcnet::Shape{10}));
  EXPECT_EQ(f.tensors.size(), 59u);
  EXPECT_FALSE(f.metadata.at("torch_version").empty());
  // The stored loss is the cross-entropy of the stored logits: the bytes landed where they should.
  EXPECT_NEAR(f.at("loss").item(), cross_entropy(f.at("logits"), f.at("labels")), 1e-6);
}

TEST(IoGolden, OpsFixtureIsSelfConsistent) {
  const auto f = hpcnet::load_safetensors(golden("ops_golden.safetensors"));
  EXPECT_EQ(f.tensors.size(), 282u);  // see tests/golden/README.md
  // int64: the class targets and gather_anchors' indices; the detection losses' targets are
  // float64 (distances, boxes, soft scores) like every other entry.
  for (const auto& [name, t] : f.tensors) {
    const bool detection = name.starts_with("bce_with_logits.") || name.starts_with("dfl_loss") ||
                           name.starts_with("ciou_loss");
    const bool integer = name == "gather_anchors.idx" || (name.ends_with(".target") && !detection);
    EXPECT_EQ(t.dtype(), integer ? DType::kInt64 : DType::kFloat64) << name;
  }
  EXPECT_NEAR(f.at("cross_entropy.y").item(),
              cross_entropy(f.at("cross_entropy.x"), f.at("cross_entropy.target")), 1e-12);
  const std::vector<double> x = f.at("relu.x").to_vector_f64();
  const std::vector<double> y = f.at("relu.y").to_vector_f64();
  const std::vector<double> dy = f.at("relu.dy").to_vector_f64();
  const std::vector<double> dx = f.at("relu.dx").to_vector_f64();
  EXPECT_EQ(x[0], 0.0);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(y[i], std::max(x[i], 0.0));
    EXPECT_EQ(dx[i], x[i] > 0 ? dy[i] : 0.0);
  }
  double sum = 0;
  for (double v : f.at("sum.x").to_vector_f64()) sum += v;
  EXPECT_NEAR(f.at("sum.y").item(), sum, 1e-12);
  std::vector<double> mean_dx(60, f.at("mean.dy").item() / 60.0);
  EXPECT_LT(max_abs_diff(f.at("mean.dx").to_vector_f64(), mean_dx), 1e-15);
  EXPECT_EQ(f.at("flatten.y").to_vector_f64(), f.at("flatten.x").to_vector_f64());
  EXPECT_EQ(f.at("flatten.dx").to_vector_f64(), f.at("flatten.dy").to_vector_f64());
}
#endif  // HPCNET_SOURCE_DIR

}  // namespace
