// Tests of the metrics writers of src/io (metrics.cpp, tb_events.cpp): CRC-32C and TFRecord framing
// against TensorBoard's values, a TensorBoard event file read back by an independent reader
// (framing, CRCs, protobuf; tests/support/event_file.h), and CsvLog's header, quoting and append.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "event_file.h"
#include "hpcnet/io.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace hpcnet;
using namespace hpcnet::test_util;

namespace {

std::string mt_host() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

}  // namespace

// ---- CRC-32C and framing -----------------------------------------------------------------------

// The check value of CRC-32C, RFC 3720's 32 zero bytes, continuation, and the masked values
// TensorBoard's own masked_crc32c gives (tensorboard.compat.tensorflow_stub.pywrap_tensorflow).
TEST(Crc32c, CheckValuesAndTensorBoardsMask) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  EXPECT_EQ(crc32c_masked(crc32c("123456789", 9)), 0xC78AB0E5u);
  const char len24[8] = {24, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(crc32c_masked(crc32c(len24, 8)), 0x224B7FA3u);
}

TEST(Crc32c, TfRecordFrameLayout) {
  const std::string data = "hello, tensorboard";
  const std::string r = tfrecord_frame(data);
  ASSERT_EQ(r.size(), data.size() + 16);
  EXPECT_EQ(le64(r, 0), data.size());
  EXPECT_EQ(le32(r, 8), crc32c_masked(crc32c(r.data(), 8)));
  EXPECT_EQ(r.substr(12, data.size()), data);
  EXPECT_EQ(le32(r, 12 + data.size()), crc32c_masked(crc32c(data.data(), data.size())));
}

// ---- TensorBoardWriter -------------------------------------------------------------------------

// TensorBoard's file name; the first event is the file version at the given wall time; then one
// event per add_scalars with its step, wall time and values (0 written too: simple_value is
// present); an empty list writes nothing; a flipped byte is caught by the reader's CRCs.
TEST(TensorBoardWriter, EventsReadBackWithCrcsAndProtobuf) {
  TempDir dir("tb");
  const double t0 = 1712345678.25;
  std::string path;
  {
    TensorBoardWriter w(dir.str(), t0);
    path = w.path();
    w.add_scalars(10, t0 + 1, {{"train/loss", 2.5}, {"lr", 0.0}});
    w.add_scalars(11, t0 + 2, {});
    w.add_scalars(20, t0 + 3, {{"val/accuracy", 61.25}, {"train/loss", 1.0 / 3}});
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_EQ(name, "events.out.tfevents.1712345678." + mt_host() + "." + std::to_string(::getpid()));
  EXPECT_EQ(fs::path(path).parent_path(), dir.path());
  std::string err;
  std::vector<tb::Event> ev = read_event_file(path, &err);
  EXPECT_EQ(err, "");
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[0].file_version(), "brain.Event:2");
  EXPECT_DOUBLE_EQ(ev[0].wall_time(), t0);
  EXPECT_FALSE(ev[0].has_summary());
  EXPECT_EQ(ev[1].step(), 10);
  EXPECT_DOUBLE_EQ(ev[1].wall_time(), t0 + 1);
  ASSERT_EQ(ev[1].summary().value_size(), 2);
  EXPECT_EQ(ev[1].summary().value(0).tag(), "train/loss");
  EXPECT_EQ(ev[1].summary().value(0).simple_value(), 2.5f);
  EXPECT_EQ(ev[1].summary().value(1).tag(), "lr");
  EXPECT_TRUE(ev[1].summary().value(1).has_simple_value()) << "a 0 must still be written";
  EXPECT_EQ(ev[2].step(), 20);
  EXPECT_EQ(ev[2].summary().value(0).tag(), "val/accuracy");
  EXPECT_EQ(ev[2].summary().value(0).simple_value(), 61.25f);
  EXPECT_EQ(ev[2].summary().value(1).simple_value(), static_cast<float>(1.0 / 3));

  // A second writer in the same second and process gets a name of its own.
  TensorBoardWriter again(dir.str(), t0);
  EXPECT_NE(again.path(), path);
  EXPECT_EQ(again.path().rfind(path, 0), 0u);

  // Corruption anywhere is detected.
  std::string bytes = read_file(path);
  bytes[bytes.size() - 10] ^= 0x20;
  write_file(dir / "bad", bytes);
  read_event_file(dir / "bad", &err);
  EXPECT_NE(err.find("CRC"), std::string::npos) << err;
}

// ---- CsvLog ------------------------------------------------------------------------------------

// The header once, rows in order, RFC 4180 quoting; append keeps the rows and ends a cut-short
// last line; a wrong row width is an Error, a different header an InputError.
TEST(CsvLog, HeaderOnceQuotingAndAppend) {
  TempDir dir("csv");
  const std::string p = dir.str("m.csv");
  {
    CsvLog c(p, {"a", "b"}, false);
    c.write({"1", "x,y"});
    c.write({"", "say \"hi\""});
    EXPECT_THROW(c.write({"1"}), Error);
  }
  EXPECT_EQ(read_file(p), "a,b\n1,\"x,y\"\n,\"say \"\"hi\"\"\"\n");
  write_file(p, read_file(p) + "3,cut");  // a crash mid-row
  {
    CsvLog c(p, {"a", "b"}, true);
    c.write({"4", "d"});
  }
  EXPECT_EQ(read_file(p), "a,b\n1,\"x,y\"\n,\"say \"\"hi\"\"\"\n3,cut\n4,d\n");
  { CsvLog c(p, {"a", "b"}, false); }
  EXPECT_EQ(read_file(p), "a,b\n");
  EXPECT_TRUE(input_error([&] { CsvLog c(p, {"a", "c"}, true); }, "header"));
  EXPECT_TRUE(input_error([&] { CsvLog c(dir.str("no/such/m.csv"), {"a"}, false); }, "no/such"));
}
