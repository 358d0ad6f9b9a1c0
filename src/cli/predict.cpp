// `hpcnet predict` (src/cli/predict.h). Images are predicted one by one. A video streams through
// three threads that overlap: a decoding thread runs ahead of the model by a bounded queue of
// frames, the main thread runs the model and the prediction, and (with --save) a writing thread
// draws each frame's prediction and encodes it into the annotated video, again behind a bounded
// queue, so memory stays a few frames whatever the video's length. At the end a timing line as
// Ultralytics' ("Speed: 1.2ms preprocess, 31.5ms inference, 0.8ms postprocess per image at shape
// (1, 3, 640, 640)") and, for a video, the frames per second of the whole pipeline.
#include "src/cli/predict.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <nlohmann/json.hpp>

#include "hpcnet/autograd.h"
#include "hpcnet/io.h"
#include "hpcnet/video.h"
#include "src/ops/ops.h"

namespace fs = std::filesystem;

namespace hpcnet::cli {

std::unique_ptr<task::Task> task_of(const train::LoadedModel& m) {
  task::TaskOptions o;
  o.imgsz = m.imgsz;
  o.augment = m.eval_policy;  // its evaluation transform follows (imagenet's Resize + CenterCrop)
  o.segment.imagenet_normalize = m.eval_policy == "imagenet";  // segment: ImageNet's mean, std
  return task::make_task(m.task, o);
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// A queue of at most `capacity` items between two threads: push waits while it is full, pop while
// it is empty; after close() pop returns what is left, then nothing, and push drops its item.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : capacity_(capacity) {}
  void push(T item) {
    std::unique_lock<std::mutex> lock(mutex_);
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || closed_; });
    if (closed_) return;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }
  // Live sources: the newest item wins. When the queue is full its oldest item is dropped (and
  // counted) instead of waiting.
  void push_latest(T item) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_) return;
    if (items_.size() >= capacity_) {
      items_.pop_front();
      ++dropped_;
    }
    items_.push_back(std::move(item));
    not_empty_.notify_one();
  }
  int64_t dropped() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return dropped_;
  }
  std::optional<T> pop() {
    std::unique_lock<std::mutex> lock(mutex_);
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    not_empty_.notify_all();
    not_full_.notify_all();
  }

 private:
  size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
  int64_t dropped_ = 0;
};

// --save DIR, as Ultralytics' increment_path: DIR itself when it does not exist or is empty (or
// with --exist-ok), else the first of DIR2, DIR3, ... that does not exist, so that the pictures
// of an earlier predict are never overwritten (*renamed says which).
std::string fresh_save_dir(std::string dir, bool exist_ok, bool* renamed) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  *renamed = false;
  if (exist_ok || !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    return dir;
  *renamed = true;
  for (int n = 2;; ++n)
    if (std::string d = dir + std::to_string(n); !fs::exists(d, ec)) return d;
}

void report_error(const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "hpcnet: error: %s\n", what.c_str());
}

struct Frame;

// One predict command's state: the model and its task, where results go, the timings.
class Predictor {
 public:
  Predictor(const PredictArgs& a, train::LoadedModel& m, const task::Task& task, Device dev,
            std::string save)
      : args_(a), model_(m), task_(task), tf_(task.predict_transform()), dev_(dev),
        save_(std::move(save)) {
    po_ = a.options;
    po_.top = a.top;
    if (!save_.empty()) saved_lines_.emplace((fs::path(save_) / "predictions.jsonl").string(), false);
    if (!a.save_json.empty()) json_file_.emplace(a.save_json, false);
  }

  // One image file; false when it could not be read (said on stderr).
  bool image(const std::string& path);
  // One video; false when it could not be opened (said on stderr).
  bool video(const std::string& path);
  void print_speed() const;

 private:
  struct Result {
    task::Outputs outputs;  // of the batch, on the CPU
    int64_t index = 0;      // in the batch
    task::PredictOptions po;  // what the prediction was made with (the input's sizes)
    task::Prediction prediction;
  };
  // The model on decoded images of one size, as one batch (timed): outputs and predictions.
  // Thread-safe: --streams runs it on several threads at once.
  std::vector<Result> run(const std::vector<const data::Image*>& images);
  // --streams: a video file's frames from `decoded`, `batch` per forward pass, on `streams`
  // threads at once (each with its share of the OpenMP threads); finish(frames, results) on
  // the calling thread, in the frames' order.
  template <class Finish>
  void run_streams(BoundedQueue<Frame>& decoded, size_t batch, int streams, Finish& finish);
  // One stream on the calling thread (live sources, other devices, --streams 1).
  template <class Finish>
  void run_one_stream(BoundedQueue<Frame>& decoded, size_t batch, Finish& finish);
  std::string unique_name(const std::string& path);
  void emit(nlohmann::json j, const std::string& label, const task::Prediction& p);
  // --save-txt: the prediction's YOLO label rows in DIR/labels/NAME.txt (none without rows).
  void save_txt(const std::string& name, const task::Prediction& p, int64_t height, int64_t width,
                nlohmann::json& j);
  // The summary line of a video: frames, FPS, the source, what was saved, dropped, skipped.
  void summarize(const std::string& path, const data::VideoReader& reader, int64_t frames,
                 int64_t dropped, double seconds, const std::string& out_file) const;

  const PredictArgs& args_;
  train::LoadedModel& model_;
  const task::Task& task_;
  const data::Compose tf_;
  Device dev_;
  task::PredictOptions po_;
  std::string save_;
  std::optional<MetricsLog> saved_lines_;  // --save: predictions.jsonl beside the pictures
  std::optional<MetricsLog> json_file_;    // --save-json FILE
  std::set<std::string> used_names_;       // --save: one name per input, even for equal stems
  std::mutex stats_mutex_;  // the timings below
  double pre_ms_ = 0, infer_ms_ = 0, post_ms_ = 0;
  int64_t runs_ = 0;
  Shape last_shape_;
  int max_streams_ = 1;  // the most --streams a video ran with
};

std::vector<Predictor::Result> Predictor::run(const std::vector<const data::Image*>& images) {
  Clock::time_point t = Clock::now();
  const data::Image& first = *images.front();
  const auto shape = tf_.output_shape(first.height, first.width);
  const int64_t n = static_cast<int64_t>(images.size()), per = shape[0] * shape[1] * shape[2];
  Tensor x = Tensor::empty({n, shape[0], shape[1], shape[2]});
  for (int64_t i = 0; i < n; ++i) {  // frames of one video: one size
    const data::Image& im = *images[static_cast<size_t>(i)];
    data::Example ex{im.pixels.data(), im.height, im.width, 0};
    tf_.apply(ex, 0, x.data<float>() + i * per);
  }
  const Shape x_shape = x.shape();
  x = x.to(dev_);
  const double pre = ms_since(t);
  t = Clock::now();
  task::Outputs outputs = task_.infer(*model_.module, x, false);
  for (Tensor& o : outputs) o = o.to(cpu_device());
  const double infer = ms_since(t);
  t = Clock::now();
  std::vector<Result> results(images.size());
  for (int64_t i = 0; i < n; ++i) {
    task::PredictOptions po = po_;
    po.height = images[static_cast<size_t>(i)]->height;  // results in the input's pixels
    po.width = images[static_cast<size_t>(i)]->width;
    po.input_height = shape[1];  // predict_transform's size of this batch
    po.input_width = shape[2];
    Result& r = results[static_cast<size_t>(i)];
    r.outputs = outputs;
    r.index = i;
    r.po = po;
    r.prediction = task_.predict(outputs, i, model_.classes, po);
  }
  const double post = ms_since(t);
  std::lock_guard<std::mutex> lock(stats_mutex_);  // --streams: runs on several threads
  if (last_shape_.empty() || n >= last_shape_[0]) last_shape_ = x_shape;  // the fullest batch
  pre_ms_ += pre;
  infer_ms_ += infer;
  post_ms_ += post;
  runs_ += n;
  return results;
}

// NAME from the file's stem; x.jpg beside x.png, or a second folder's x.jpg, gets x_jpg (then
// x_jpg_2, ...) instead of overwriting the first one's results.
std::string Predictor::unique_name(const std::string& path) {
  std::string base = fs::path(path).stem().string();
  if (used_names_.count(base)) {
    std::string ext = fs::path(path).extension().string();
    if (!ext.empty()) base += "_" + ext.substr(1);
    for (int k = 2; used_names_.count(base); ++k)
      base = fs::path(path).stem().string() + "_" + ext.substr(ext.empty() ? 0 : 1) + "_" +
             std::to_string(k);
  }
  used_names_.insert(base);
  return base;
}

void Predictor::emit(nlohmann::json j, const std::string& label, const task::Prediction& p) {
  j.update(p.json);
  if (saved_lines_) saved_lines_->write(j);
  if (json_file_) json_file_->write(j);
  if (args_.stream_out) return;  // stdout carries the frames
  if (args_.json)
    std::cout << j.dump() << std::endl;
  else
    std::printf("%s:%s\n", label.c_str(), p.line.c_str());
}

void Predictor::save_txt(const std::string& name, const task::Prediction& p, int64_t height,
                         int64_t width, nlohmann::json& j) {
  if (!args_.save_txt) return;
  const std::optional<std::string> rows = task_.label_file(p, height, width);
  if (!rows || rows->empty()) return;  // as Ultralytics: no file for an image without objects
  std::string text = *rows;
  if (!args_.save_conf) {  // each row's last field is the score: class cx cy w h [conf]
    text.clear();
    size_t begin = 0;
    for (size_t end; (end = rows->find('\n', begin)) != std::string::npos; begin = end + 1) {
      const std::string row = rows->substr(begin, end - begin);
      text += row.substr(0, row.rfind(' ')) + "\n";
    }
  }
  const std::string file = (fs::path(save_) / "labels" / (name + ".txt")).string();
  write_file_atomic(file, text);
  j["saved"].push_back(file);
}

bool Predictor::image(const std::string& path) {
  data::Image im;
  try {
    im = data::read_image_file(path, task_.decode_min_side());
  } catch (const InputError& e) {
    report_error(e.what());
    return false;
  }
  const Result r = std::move(run({&im}).front());
  nlohmann::json j = {{"image", path}};
  if (!save_.empty()) {
    const std::string base = unique_name(path);
    for (auto& [suffix, bytes] : task_.pictures(im, r.outputs, 0, model_.classes, r.po)) {
      const std::string file = (fs::path(save_) / (base + suffix)).string();
      write_file_atomic(file, std::string_view(reinterpret_cast<const char*>(bytes.data()),
                                               bytes.size()));
      j["saved"].push_back(file);
    }
    if (const std::optional<std::string> rows =
            task_.label_file(r.prediction, im.height, im.width)) {
      const std::string file = (fs::path(save_) / (base + ".txt")).string();
      write_file_atomic(file, *rows);
      j["saved"].push_back(file);
    }
    save_txt(base, r.prediction, im.height, im.width, j);
  }
  emit(std::move(j), path, r.prediction);
  return true;
}

// The name a live source's results are saved under: a URL after its scheme, every character
// other than a letter, digit, '-' or '.' made '_' (rtsp://cam/live -> cam_live); videoN for a
// camera; stdin for "-".
std::string stream_name(const std::string& url) {
  if (url == "-") return "stdin";
  if (data::is_camera(url)) return "video" + url.substr(url.find_first_of("0123456789"));
  std::string name = url.substr(url.find("://") + 3);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return name.substr(0, 80);
}

// The annotated video's file: the source's name and container where hpcnet writes that
// container (.mp4, .mkv, .mov, .m4v, .avi), else NAME.mp4.
std::string annotated_video_name(const std::string& save, const std::string& base,
                                 const std::string& source) {
  std::string ext = data::is_live_source(source) ? "" : fs::path(source).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext != ".mp4" && ext != ".mkv" && ext != ".mov" && ext != ".m4v" && ext != ".avi")
    ext = ".mp4";
  return (fs::path(save) / (base + ext)).string();
}

// Where a video's annotated frames go: --save's video file, --stream-out's MJPEG on stdout.
struct AnnotatedVideo {
  std::unique_ptr<data::VideoWriter> file, piped;
  bool any() const { return file || piped; }
  void write(const data::Image& frame) {
    if (file) file->write(frame);
    if (piped) piped->write(frame);
  }
  void close() {
    if (file) file->close();
    if (piped) piped->close();
  }
};

struct Frame {
  int64_t index = 0;
  data::Image image;
  task::Outputs outputs;  // filled by the model, for drawing: the batch's
  int64_t batch_index = 0;  // the frame's place in that batch
  task::PredictOptions po;  // the prediction's (Predictor::Result::po)
};

// --streams' count: the one asked for (at most one per thread), or 2 with 2 threads or more.
int stream_count(int requested) {
  const int threads = std::max(ops::get_num_threads(), 1);
  return requested > 0 ? std::min(requested, threads) : std::min(threads, 2);
}

// `pending` := the next `batch` frames of `decoded` (fewer at its end); false when none came.
bool next_batch(BoundedQueue<Frame>& decoded, size_t batch, std::vector<Frame>& pending) {
  pending.clear();
  while (pending.size() < batch) {
    std::optional<Frame> f = decoded.pop();
    if (!f) break;
    pending.push_back(std::move(*f));
  }
  return !pending.empty();
}

template <class Finish>
void Predictor::run_one_stream(BoundedQueue<Frame>& decoded, size_t batch, Finish& finish) {
  std::vector<Frame> pending;
  while (next_batch(decoded, batch, pending)) {
    std::vector<const data::Image*> images;
    for (const Frame& f : pending) images.push_back(&f.image);
    std::vector<Result> results = run(images);
    finish(pending, results);
  }
}

template <class Finish>
void Predictor::run_streams(BoundedQueue<Frame>& decoded, size_t batch, int streams,
                            Finish& finish) {
  // Jobs go to the streams in turn and come back in the same turn, so the frames stay in order.
  struct Job {
    std::vector<Frame> frames;
    std::vector<Result> results;
  };
  std::vector<std::unique_ptr<BoundedQueue<Job>>> in, out;
  for (int k = 0; k < streams; ++k) {
    in.push_back(std::make_unique<BoundedQueue<Job>>(1));
    out.push_back(std::make_unique<BoundedQueue<Job>>(1));
  }
  const int threads = std::max(ops::get_num_threads(), streams);
  std::mutex error_mutex;
  std::exception_ptr error;
  auto fail = [&](std::exception_ptr e) {  // the first error stops every thread
    {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = e;
    }
    decoded.close();
    for (int k = 0; k < streams; ++k) {
      in[static_cast<size_t>(k)]->close();
      out[static_cast<size_t>(k)]->close();
    }
  };
  std::thread dispatcher([&] {
    try {
      std::vector<Frame> pending;
      for (size_t k = 0; next_batch(decoded, batch, pending); k = (k + 1) % in.size())
        in[k]->push(Job{std::move(pending), {}});
    } catch (...) {
      fail(std::current_exception());
    }
    for (auto& q : in) q->close();
  });
  std::vector<std::thread> workers;
  for (int k = 0; k < streams; ++k)
    workers.emplace_back([&, k] {
      try {
        ops::set_num_threads(threads / streams + (k < threads % streams ? 1 : 0));
        NoGradGuard no_grad;  // per thread
        while (std::optional<Job> job = in[static_cast<size_t>(k)]->pop()) {
          std::vector<const data::Image*> images;
          for (const Frame& f : job->frames) images.push_back(&f.image);
          job->results = run(images);
          out[static_cast<size_t>(k)]->push(std::move(*job));
        }
      } catch (...) {
        fail(std::current_exception());
      }
      out[static_cast<size_t>(k)]->close();
    });
  try {
    for (size_t k = 0;; k = (k + 1) % out.size()) {
      std::optional<Job> job = out[k]->pop();
      if (!job) break;  // this stream got no more jobs, so none after it did either
      finish(job->frames, job->results);
    }
  } catch (...) {
    fail(std::current_exception());
  }
  dispatcher.join();
  for (std::thread& w : workers) w.join();
  if (error) std::rethrow_exception(error);
}

bool Predictor::video(const std::string& path) {
  std::unique_ptr<data::VideoReader> reader;
  // A growing file (--follow) is read as it comes, as a stream.
  const bool followed = args_.follow && !data::is_live_source(path);
  const bool live = data::is_live_source(path) || followed;
  try {
    data::VideoOptions vo;
    vo.timeout_s = args_.stream_timeout;
    vo.follow = followed;
    vo.format = args_.input_format;
    vo.video_size = args_.video_size;
    if (!args_.pixel_format.empty()) vo.pixel_format = args_.pixel_format;
    vo.framerate = args_.framerate;
    reader = std::make_unique<data::VideoReader>(path, vo);
  } catch (const InputError& e) {
    report_error(e.what());
    return false;
  }
  const int64_t total = reader->frame_count(), stride = args_.vid_stride;
  AnnotatedVideo writer;  // --save's file and --stream-out's MJPEG on stdout
  std::string out_file;
  const double out_fps = reader->fps() / static_cast<double>(stride);
  // The name results are saved under: the file's stem, a stream's name.
  const std::string base =
      save_.empty() ? ""
                    : unique_name(data::is_live_source(path) ? stream_name(path) + ".mp4" : path);
  if (!save_.empty()) {
    out_file = annotated_video_name(save_, base, path);
    writer.file = std::make_unique<data::VideoWriter>(out_file, reader->height(), reader->width(),
                                                      out_fps);
  }
  if (args_.stream_out)
    writer.piped = std::make_unique<data::VideoWriter>("-", reader->height(), reader->width(),
                                                       out_fps);
  const Clock::time_point start = Clock::now();
  // A live stream does not wait for the model: the newest frame wins, the others are counted.
  BoundedQueue<Frame> decoded(live ? 1 : 4), drawn(4);
  std::exception_ptr decode_error, write_error;
  std::thread decoder([&] {
    try {
      Frame f;
      for (int64_t k = 0; reader->next(f.image); ++k)
        if (k % stride == 0) {
          f.index = k;
          if (live)
            decoded.push_latest(std::move(f));
          else
            decoded.push(std::move(f));
          f = Frame{};
        }
    } catch (...) {
      decode_error = std::current_exception();
    }
    decoded.close();
  });
  std::thread encoder([&] {
    if (!writer.any()) return;  // nothing to draw
    try {
      while (std::optional<Frame> f = drawn.pop()) {
        task_.annotate(f->image, f->outputs, f->batch_index, model_.classes, f->po);
        writer.write(f->image);
      }
      writer.close();
    } catch (...) {
      write_error = std::current_exception();
      drawn.close();
    }
  });
  int64_t frames = 0;
  // The results of a batch of frames, in order: printed and saved, and the frames passed on to
  // the writing thread.
  auto finish = [&](std::vector<Frame>& pending, std::vector<Result>& results) {
    for (size_t i = 0; i < pending.size(); ++i) {
      Frame& f = pending[i];
      const std::string count = total > 0 ? std::to_string(total) : std::string("?");
      nlohmann::json j = {{"video", path}, {"frame", f.index}};
      // Ultralytics' labels/NAME_FRAME.txt, frames numbered from 1
      save_txt(base + "_" + std::to_string(f.index + 1), results[i].prediction, f.image.height,
               f.image.width, j);
      emit(std::move(j), path + " (frame " + std::to_string(f.index + 1) + "/" + count + ")",
           results[i].prediction);
      ++frames;
      if (writer.any()) {
        f.outputs = std::move(results[i].outputs);
        f.batch_index = results[i].index;
        f.po = results[i].po;
        drawn.push(std::move(f));
      }
    }
  };
  // --batch frames per forward pass (a live source: one, it does not wait for more).
  const size_t batch = live ? 1 : static_cast<size_t>(args_.batch);
  const int streams = live || !dev_.is_cpu() ? 1 : stream_count(args_.streams);
  std::exception_ptr model_error;  // raised after the other threads are joined
  try {
    if (streams > 1) {
      max_streams_ = std::max(max_streams_, streams);
      run_streams(decoded, batch, streams, finish);
    } else {
      run_one_stream(decoded, batch, finish);
    }
  } catch (...) {
    model_error = std::current_exception();
    decoded.close();
  }
  drawn.close();
  decoder.join();
  encoder.join();
  if (model_error) std::rethrow_exception(model_error);
  if (decode_error) std::rethrow_exception(decode_error);
  if (write_error) std::rethrow_exception(write_error);
  summarize(path, *reader, frames, decoded.dropped(), ms_since(start) / 1000.0, out_file);
  return true;
}

void Predictor::summarize(const std::string& path, const data::VideoReader& reader,
                          int64_t frames, int64_t dropped, double seconds,
                          const std::string& out_file) const {
  std::string notes;
  if (!out_file.empty()) notes += ", annotated video " + out_file;
  auto count = [](int64_t n, const char* what) {
    return ", " + std::to_string(n) + " " + what + (n == 1 ? "" : "s");
  };
  if (reader.bad_packets() > 0) notes += count(reader.bad_packets(), "damaged packet") + " skipped";
  if (reader.missing_frames() > 0)
    notes += count(reader.missing_frames(), "frame") + " lost to damaged data";
  if (reader.damaged_frames() > 0)
    notes += count(reader.damaged_frames(), "frame") + " decoded over damaged data";
  if (dropped > 0) notes += count(dropped, "frame") + " dropped while the model was busy";
  if (args_.follow && !data::is_live_source(path))
    notes += "; the file stopped growing (" + reader.end_reason() + ")";
  else if (!reader.end_reason().empty())
    notes += "; the stream ended: " + reader.end_reason();
  else if (data::is_live_source(path))
    notes += "; the stream ended";
  std::fflush(stdout);
  std::fprintf(stderr, "%s: %lld frames in %.2f s, %.1f FPS (%s %lldx%lld at %.3g FPS)%s\n",
               path.c_str(), static_cast<long long>(frames), seconds,
               seconds > 0 ? static_cast<double>(frames) / seconds : 0.0, reader.codec().c_str(),
               static_cast<long long>(reader.width()), static_cast<long long>(reader.height()),
               reader.fps(), notes.c_str());
}

void Predictor::print_speed() const {
  if (runs_ == 0) return;
  const double n = static_cast<double>(runs_);
  std::string shape;
  for (int64_t d : last_shape_) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  std::fflush(stdout);
  std::fprintf(stderr,
               "Speed: %.1fms preprocess, %.1fms inference, %.1fms postprocess per image at "
               "shape (%s)%s\n",
               pre_ms_ / n, infer_ms_ / n, post_ms_ / n, shape.c_str(),
               max_streams_ > 1
                   ? (", " + std::to_string(max_streams_) + " streams at once").c_str()
                   : "");
}

// Whether an input is read as a video: by its name, a live source, or any file with
// --input-format (raw frames, MJPEG: names say nothing).
bool is_video_input(const std::string& path, const PredictArgs& a) {
  std::error_code ec;
  return data::is_video_name(path) || data::is_live_source(path) ||
         (!a.input_format.empty() && fs::is_regular_file(path, ec));
}

// The flags' combinations that cannot work, as one-line usage errors.
void check_output_flags(const PredictArgs& a, const task::Task& task) {
  HPCNET_REQUIRE(!a.save_txt || !a.save.empty(),
                 "--save-txt writes its files into --save's folder (DIR/labels/); give --save DIR");
  HPCNET_REQUIRE(!a.save_conf || a.save_txt, "--save-conf adds the score to --save-txt's rows");
  HPCNET_REQUIRE(!a.save_txt || task.target_kind() == data::TargetKind::kBoxes,
                 "--save-txt writes YOLO label rows (class cx cy w h) of detection models; a " +
                     task.name() + " model's results are in --save's pictures and --save-json");
  HPCNET_REQUIRE(a.input_format == "rawvideo" || (a.video_size.empty() && a.pixel_format.empty()),
                 "--video-size and --pixel-format describe raw frames: give --input-format "
                 "rawvideo with them");
  HPCNET_REQUIRE(a.framerate >= 0, "--framerate must be positive (frames per second)");
}

}  // namespace

int cmd_predict(const PredictArgs& a) {
  const Device dev = train::resolve_device(a.device);
  HPCNET_REQUIRE(a.threads >= 0, "--threads must be >= 0 (0 = all cores)");
  ops::set_num_threads(a.threads);
  train::check_inference_precision(a.precision);  // before the file is read
  HPCNET_REQUIRE(a.top >= 1, "--top must be at least 1");
  HPCNET_REQUIRE(a.imgsz >= 0, "--imgsz must be at least 1 (0: the size in the model file)");
  HPCNET_REQUIRE(a.vid_stride >= 1, "--vid-stride must be at least 1 (1: every frame)");
  HPCNET_REQUIRE(a.stream_timeout > 0, "--stream-timeout must be positive (seconds)");
  HPCNET_REQUIRE(a.batch >= 1, "--batch must be at least 1");
  HPCNET_REQUIRE(a.streams >= 0, "--streams must be at least 1 (0: automatic)");
  const task::PredictOptions& po = a.options;
  HPCNET_REQUIRE(po.conf >= 0 && po.conf <= 1, "--conf must be in [0, 1]");
  HPCNET_REQUIRE(po.iou >= 0 && po.iou <= 1, "--iou must be in [0, 1]");
  HPCNET_REQUIRE(po.max_det >= 1, "--max-det must be at least 1");
  train::LoadedModel m = train::load_model(a.weights, a.model);
  train::apply_inference_precision(a.precision, m, a.weights);
  m.module->to_(dev);
  if (a.imgsz > 0) m.imgsz = a.imgsz;
  const std::unique_ptr<task::Task> task = task_of(m);
  check_output_flags(a, *task);
  std::vector<std::string> inputs;
  for (const std::string& p : a.images) {
    std::error_code ec;
    // A stream, a camera, stdin: opened as it is read; a file of --input-format whatever its name.
    if (data::is_live_source(p) || (!a.input_format.empty() && fs::is_regular_file(p, ec))) {
      inputs.push_back(p);
      continue;
    }
    std::vector<std::string> files = data::list_image_files(p, /*with_videos=*/true);
    inputs.insert(inputs.end(), files.begin(), files.end());
  }
  bool renamed = false;
  const std::string save = a.save.empty() ? "" : fresh_save_dir(a.save, a.exist_ok, &renamed);
  if (!save.empty()) {
    std::error_code ec;
    fs::create_directories(a.save_txt ? fs::path(save) / "labels" : fs::path(save), ec);
    HPCNET_REQUIRE(!ec && fs::is_directory(save),
                   "--save " + save + ": cannot create the folder (" +
                       (ec ? ec.message() : std::string("not a directory")) + ")");
  }
  for (const std::string& p : inputs)
    HPCNET_REQUIRE(!a.stream_out || is_video_input(p, a),
                   "--stream-out writes the frames of videos and streams; " + p +
                       " is an image (--save writes its picture)");
  NoGradGuard no_grad;
  Predictor predictor(a, m, *task, dev, save);
  int64_t failed = 0;
  for (const std::string& path : inputs)
    if (!(is_video_input(path, a) ? predictor.video(path) : predictor.image(path)))
      ++failed;
  // The timing line after videos (as Ultralytics'), and after images with --speed (scripts
  // reading predict's stderr on images see nothing new).
  const bool videos = std::any_of(inputs.begin(), inputs.end(),
                                  [&](const std::string& p) { return is_video_input(p, a); });
  if (a.speed || videos) predictor.print_speed();
  if (!save.empty()) {
    const std::string why =
        renamed ? " (" + a.save + " holds earlier results; --exist-ok writes into it)" : "";
    std::fprintf(stderr, "hpcnet: results saved to %s%s\n", save.c_str(), why.c_str());
  }
  if (failed > 0 && inputs.size() > 1) {  // one input: its own line says it all
    std::fflush(stdout);
    std::fprintf(stderr, "hpcnet: error: %lld of %zu %s could not be read (see above)\n",
                 static_cast<long long>(failed), inputs.size(), videos ? "inputs" : "images");
  }
  return failed > 0 ? 2 : 0;
}

}  // namespace hpcnet::cli
