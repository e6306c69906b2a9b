// SPDX-License-Identifier: Apache-2.0
#include "saturate/train/checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <torch/serialize.h>
#include <torch/torch.h>

#include "saturate/core/crc32c.h"
#include "saturate/core/error.h"
#include "saturate/core/temp_folder.h"

namespace saturate {
namespace {

constexpr const char* kStateFile = "state.pt";
constexpr const char* kMetaFile = "meta.json";
constexpr const char* kManifestFile = "MANIFEST.json";
constexpr const char* kStepPrefix = "step-";

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return name;
}

// The step of a "step-N" folder name; -1 for anything else.
int64_t parse_step(const std::string& name) {
  const std::string prefix = kStepPrefix;
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (int64_t{1} << 50)) return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

// Writes `bytes` to `path` and syncs it to the disk before returning.
void write_synced(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  SATURATE_CHECK_RUN(fd >= 0, "checkpoint: cannot create ", path, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      SATURATE_CHECK_RUN(false, "checkpoint: cannot write ", path, ": ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  SATURATE_CHECK_RUN(synced, "checkpoint: cannot sync ", path, ": ", std::strerror(err));
}

// A folder's entries (a rename in it) reach the disk only when the folder itself is synced.
void sync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  SATURATE_CHECK_RUN(fd >= 0, "checkpoint: cannot open ", dir, ": ", std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  SATURATE_CHECK_RUN(synced, "checkpoint: cannot sync ", dir, ": ", std::strerror(err));
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SATURATE_CHECK(in.good(), "checkpoint: ", path, " is missing or unreadable");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// StepRecord <-> one row of a float64 [N, kRecordFields] tensor (integers are exact in a
// double up to 2^53). Checkpoints written before the noise-scale fields have the first 19.
constexpr int64_t kRecordFields = 27;
constexpr int64_t kRecordFieldsBeforeNoise = 19;

at::Tensor records_to_tensor(const std::vector<StepRecord>& records) {
  at::Tensor t = torch::zeros({static_cast<int64_t>(records.size()), kRecordFields}, torch::kFloat64);
  double* d = t.data_ptr<double>();
  for (const StepRecord& r : records) {
    const double row[kRecordFields] = {
        static_cast<double>(r.step), static_cast<double>(r.epoch), static_cast<double>(r.samples),
        r.start_ms, r.data_wait_ms, r.host_to_device_ms, r.forward_ms, r.backward_ms,
        r.optimizer_ms, r.communication_ms, r.other_ms, r.step_ms, r.loss, r.loss_scale, r.lr,
        r.is_skipped ? 1.0 : 0.0, r.grad_norm, static_cast<double>(r.peak_memory_bytes),
        static_cast<double>(r.page_faults), r.noise_grad_sqr, r.noise_trace, r.gns,
        r.noise_grad_sqr_precond, r.noise_trace_precond, r.gns_precond, r.gns_b_small,
        r.gns_b_big};
    std::copy(row, row + kRecordFields, d);
    d += kRecordFields;
  }
  return t;
}

std::vector<StepRecord> records_from_tensor(const at::Tensor& t, const std::string& where) {
  const int64_t fields = t.dim() == 2 ? t.size(1) : 0;
  SATURATE_CHECK((fields == kRecordFields || fields == kRecordFieldsBeforeNoise) &&
                     t.scalar_type() == at::kDouble,
                 "checkpoint: ", where, ": step records have shape ", t.sizes(), ", expected [N, ",
                 kRecordFields, "]");
  const at::Tensor c = t.contiguous();
  const double* d = c.data_ptr<double>();
  std::vector<StepRecord> out(static_cast<size_t>(c.size(0)));
  for (StepRecord& r : out) {
    r.step = static_cast<int64_t>(d[0]);
    r.epoch = static_cast<int64_t>(d[1]);
    r.samples = static_cast<int64_t>(d[2]);
    r.start_ms = d[3];
    r.data_wait_ms = d[4];
    r.host_to_device_ms = d[5];
    r.forward_ms = d[6];
    r.backward_ms = d[7];
    r.optimizer_ms = d[8];
    r.communication_ms = d[9];
    r.other_ms = d[10];
    r.step_ms = d[11];
    r.loss = d[12];
    r.loss_scale = d[13];
    r.lr = d[14];
    r.is_skipped = d[15] != 0.0;
    r.grad_norm = d[16];
    r.peak_memory_bytes = static_cast<int64_t>(d[17]);
    r.page_faults = static_cast<int64_t>(d[18]);
    if (fields == kRecordFields) {
      r.noise_grad_sqr = d[19];
      r.noise_trace = d[20];
      r.gns = d[21];
      r.noise_grad_sqr_precond = d[22];
      r.noise_trace_precond = d[23];
      r.gns_precond = d[24];
      r.gns_b_small = d[25];
      r.gns_b_big = d[26];
    }
    d += fields;
  }
  return out;
}

std::string serialize_state(const TrainState& s) {
  torch::serialize::OutputArchive archive;
  archive.write("model_count", torch::tensor(static_cast<int64_t>(s.model.size())));
  for (size_t i = 0; i < s.model.size(); ++i)
    archive.write("model/" + std::to_string(i), s.model[i].detach().to(at::kCPU));
  const at::Tensor opt = torch::empty({static_cast<int64_t>(s.optimizer.size())}, torch::kUInt8);
  if (!s.optimizer.empty()) std::memcpy(opt.data_ptr(), s.optimizer.data(), s.optimizer.size());
  archive.write("optimizer", opt);
  if (s.cpu_generator.defined()) archive.write("generator/cpu", s.cpu_generator);
  archive.write("generator/cuda_count",
                torch::tensor(static_cast<int64_t>(s.cuda_generators.size())));
  for (size_t i = 0; i < s.cuda_generators.size(); ++i)
    archive.write("generator/cuda/" + std::to_string(i), s.cuda_generators[i]);
  archive.write("records", records_to_tensor(s.records));
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

at::Tensor read_tensor(torch::serialize::InputArchive& archive, const std::string& key) {
  at::Tensor t;
  archive.read(key, t);
  return t;
}

void deserialize_state(const std::string& bytes, TrainState& s, const std::string& where) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive;
  archive.load_from(in);
  const int64_t n = read_tensor(archive, "model_count").item<int64_t>();
  SATURATE_CHECK(n >= 0 && n < (1 << 20), "checkpoint: ", where, ": bad tensor count ", n);
  s.model.clear();
  for (int64_t i = 0; i < n; ++i) s.model.push_back(read_tensor(archive, "model/" + std::to_string(i)));
  const at::Tensor opt = read_tensor(archive, "optimizer").contiguous();
  s.optimizer.assign(static_cast<const char*>(opt.data_ptr()), opt.nbytes());
  at::Tensor cpu;
  if (archive.try_read("generator/cpu", cpu)) s.cpu_generator = cpu;
  const int64_t cuda = read_tensor(archive, "generator/cuda_count").item<int64_t>();
  SATURATE_CHECK(cuda >= 0 && cuda <= 1024, "checkpoint: ", where, ": bad GPU count ", cuda);
  s.cuda_generators.clear();
  for (int64_t i = 0; i < cuda; ++i)
    s.cuda_generators.push_back(read_tensor(archive, "generator/cuda/" + std::to_string(i)));
  s.records = records_from_tensor(read_tensor(archive, "records"), where);
}

nlohmann::json file_entry(const std::string& bytes) {
  return {{"bytes", bytes.size()}, {"crc32c", crc32c(bytes.data(), bytes.size())}};
}

// The manifest's CRC covers its own text without the "manifest_crc32c" field.
uint32_t manifest_crc(nlohmann::json manifest) {
  manifest.erase("manifest_crc32c");
  const std::string text = manifest.dump();
  return crc32c(text.data(), text.size());
}

// POSIX calls rather than std::filesystem: libtorch.so exports std::filesystem symbols of its
// own build, and a binary linked against it can call into them (a crash in remove_all).

// The names in `dir` other than "." and ".." (none when it cannot be read).
std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") out.push_back(name);
    }
    ::closedir(d);
  }
  return out;
}

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The size of a file, or -1 when it cannot be read.
int64_t file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  return static_cast<int64_t>(st.st_size);
}

}  // namespace

std::vector<std::string> tensor_fingerprint(const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> out;
  out.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    std::ostringstream s;
    s << t.sizes() << " " << t.scalar_type();
    out.push_back(s.str());
  }
  return out;
}

CheckpointStore::CheckpointStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  SATURATE_CHECK(!dir_.empty(), "checkpoint: --checkpoint-dir is empty");
  SATURATE_CHECK(keep_ >= 1, "checkpoint: --keep-checkpoints must be at least 1, got ", keep_);
}

void CheckpointStore::open_for_writing() {
  if (is_open_) return;
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    make_folders(dir_, "checkpoint: --checkpoint-dir");
  } else {
    SATURATE_CHECK(S_ISDIR(st.st_mode), "checkpoint: --checkpoint-dir ", dir_, " is not a folder");
  }
  SATURATE_CHECK(::access(dir_.c_str(), W_OK) == 0, "checkpoint: --checkpoint-dir ", dir_,
                 " is not writable");
  // What a crash in the middle of save() leaves: never a step-N folder, so never loaded.
  for (const std::string& name : entries(dir_)) {
    if (name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0) remove_tree(dir_ + "/" + name);
  }
  is_open_ = true;
}

std::vector<std::string> CheckpointStore::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  for (const std::string& name : entries(dir_)) {
    const int64_t step = parse_step(name);
    if (step >= 0 && is_folder(dir_ + "/" + name)) found.emplace_back(step, dir_ + "/" + name);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::string CheckpointStore::save(const TrainState& state, const nlohmann::json& info) {
  open_for_writing();
  const std::string name = step_name(state.step);
  const std::string tmp = dir_ + "/.tmp-" + name;
  const std::string final_dir = dir_ + "/" + name;
  remove_tree(tmp);
  SATURATE_CHECK_RUN(::mkdir(tmp.c_str(), 0755) == 0, "checkpoint: cannot create ", tmp, ": ",
                 std::strerror(errno));
  try {
    const std::string state_bytes = serialize_state(state);
    nlohmann::json meta;
    meta["step"] = state.step;
    meta["epoch"] = state.epoch;
    meta["batch_in_epoch"] = state.batch_in_epoch;
    meta["scaler"] = state.scaler;
    meta["segment_starts"] = state.segment_starts;
    meta["train_wall_s"] = state.train_wall_s;
    meta["adaptive_per_step"] = state.adaptive_per_step;
    meta["adaptive_lr_multiplier"] = state.adaptive_lr_multiplier;
    meta["model_fingerprint"] = tensor_fingerprint(state.model);
    meta["info"] = info;
    const std::string meta_bytes = meta.dump(2) + "\n";
    write_synced(tmp + "/" + kStateFile, state_bytes);
    write_synced(tmp + "/" + kMetaFile, meta_bytes);
    nlohmann::json manifest;
    manifest["schema_version"] = kSchemaVersion;
    manifest["step"] = state.step;
    manifest["files"] = {{kStateFile, file_entry(state_bytes)}, {kMetaFile, file_entry(meta_bytes)}};
    manifest["manifest_crc32c"] = manifest_crc(manifest);
    write_synced(tmp + "/" + kManifestFile, manifest.dump(2) + "\n");
    sync_folder(tmp);
    // A checkpoint of the same step (a resumed run saving where it began) is moved aside first:
    // rename() cannot replace a folder that has files.
    const std::string old = dir_ + "/.old-" + name;
    const bool replacing = ::access(final_dir.c_str(), F_OK) == 0;
    if (replacing) {
      remove_tree(old);
      SATURATE_CHECK_RUN(::rename(final_dir.c_str(), old.c_str()) == 0, "checkpoint: cannot move ",
                     final_dir, " aside: ", std::strerror(errno));
    }
    SATURATE_CHECK_RUN(::rename(tmp.c_str(), final_dir.c_str()) == 0, "checkpoint: cannot rename ",
                   tmp, " to ", final_dir, ": ", std::strerror(errno));
    sync_folder(dir_);
    if (replacing) remove_tree(old);
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
  std::vector<std::string> all = list();
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) remove_tree(all[i]);
  return final_dir;
}

LoadedCheckpoint CheckpointStore::load(const std::string& checkpoint_dir) {
  const std::string manifest_path = checkpoint_dir + "/" + kManifestFile;
  // A manifest is a few hundred bytes; anything much larger is not one (and is not read).
  const int64_t manifest_size = file_size(manifest_path);
  SATURATE_CHECK(manifest_size >= 0, "checkpoint: ", manifest_path, " is missing or unreadable");
  SATURATE_CHECK(manifest_size <= (1 << 20), "checkpoint: ", manifest_path, " has ",
                 manifest_size, " bytes: not a checkpoint manifest");
  nlohmann::json manifest = nlohmann::json::parse(read_bytes(manifest_path), nullptr, false);
  SATURATE_CHECK(manifest.is_object() && manifest.contains("manifest_crc32c") &&
                     manifest["manifest_crc32c"].is_number_unsigned(),
                 "checkpoint: ", manifest_path, " is not a checkpoint manifest (truncated or corrupt)");
  SATURATE_CHECK(manifest["manifest_crc32c"].get<uint32_t>() == manifest_crc(manifest),
                 "checkpoint: ", manifest_path, " fails its checksum (corrupt)");
  const int version = manifest.value("schema_version", 0);
  SATURATE_CHECK(version == kSchemaVersion, "checkpoint: ", manifest_path, " has schema version ",
                 version, "; this saturate reads version ", kSchemaVersion);
  auto checked = [&](const char* file) {
    const std::string path = checkpoint_dir + "/" + file;
    SATURATE_CHECK(manifest.contains("files") && manifest["files"].is_object() &&
                       manifest["files"].contains(file) && manifest["files"][file].is_object(),
                   "checkpoint: ", manifest_path, " does not list ", file);
    const nlohmann::json& entry = manifest["files"][file];
    const uint64_t expected = entry.value("bytes", uint64_t{0});
    // The size is checked before anything is read: a damaged file is never loaded whole.
    const int64_t found = file_size(path);
    SATURATE_CHECK(found >= 0, "checkpoint: ", path, " is missing or unreadable");
    const auto size = static_cast<uint64_t>(found);
    SATURATE_CHECK(size == expected, "checkpoint: ", path, " has ", size,
                   " bytes, the manifest says ", expected,
                   size < expected ? " (truncated)" : " (changed since it was written)");
    std::string bytes = read_bytes(path);
    SATURATE_CHECK(bytes.size() == expected, "checkpoint: ", path, " changed while being read");
    SATURATE_CHECK(crc32c(bytes.data(), bytes.size()) == entry.value("crc32c", uint32_t{0}),
                   "checkpoint: ", path, " fails its checksum (corrupt)");
    return bytes;
  };
  const std::string state_bytes = checked(kStateFile);
  const nlohmann::json meta = nlohmann::json::parse(checked(kMetaFile), nullptr, false);
  const std::string meta_path = checkpoint_dir + "/" + kMetaFile;
  SATURATE_CHECK(meta.is_object(), "checkpoint: ", meta_path, " is not JSON");
  LoadedCheckpoint out;
  out.path = checkpoint_dir;
  TrainState& s = out.state;
  try {
    s.step = meta.at("step").get<int64_t>();
    s.epoch = meta.at("epoch").get<int64_t>();
    s.batch_in_epoch = meta.at("batch_in_epoch").get<int64_t>();
    s.scaler = meta.at("scaler");
    s.segment_starts = meta.at("segment_starts").get<std::vector<int64_t>>();
    s.train_wall_s = meta.at("train_wall_s").get<double>();
    // Checkpoints before --adaptive-batch have neither: a fixed batch.
    s.adaptive_per_step = meta.value("adaptive_per_step", int64_t{1});
    s.adaptive_lr_multiplier = meta.value("adaptive_lr_multiplier", 1.0);
    out.info = meta.at("info");
  } catch (const nlohmann::json::exception& e) {
    SATURATE_CHECK(false, "checkpoint: ", meta_path, ": ", e.what());
  }
  try {
    deserialize_state(state_bytes, s, checkpoint_dir + "/" + kStateFile);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    const std::string what = c10_error ? c10_error->what_without_backtrace() : e.what();
    SATURATE_CHECK(false, "checkpoint: ", checkpoint_dir, "/", kStateFile, " cannot be read: ",
                   what.substr(0, what.find('\n')));
  }
  SATURATE_CHECK(static_cast<int64_t>(s.records.size()) == s.step, "checkpoint: ", checkpoint_dir,
                 ": ", s.records.size(), " step records for step ", s.step);
  SATURATE_CHECK(meta.value("model_fingerprint", nlohmann::json()) ==
                     nlohmann::json(tensor_fingerprint(s.model)),
                 "checkpoint: ", meta_path, ": the tensors in ", kStateFile,
                 " do not match its model fingerprint");
  return out;
}

std::optional<LoadedCheckpoint> CheckpointStore::load_newest() const {
  struct stat st {};
  SATURATE_CHECK(::stat(dir_.c_str(), &st) != 0 || S_ISDIR(st.st_mode), "checkpoint: ", dir_,
                 " is not a folder");
  const std::vector<std::string> all = list();
  if (all.empty()) return std::nullopt;
  std::vector<std::string> rejected;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      LoadedCheckpoint c = load(*it);
      c.rejected = std::move(rejected);
      return c;
    } catch (const Error& e) {
      rejected.push_back(e.what());
    }
  }
  SATURATE_CHECK(false, "checkpoint: no usable checkpoint in ", dir_, " (", all.size(),
                 all.size() == 1 ? " found" : " found, all failed their checks", "; newest: ",
                 rejected.front().substr(std::string("checkpoint: ").size()), ")");
  return std::nullopt;
}

}  // namespace saturate
