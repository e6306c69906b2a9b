// SPDX-License-Identifier: Apache-2.0
#pragma once
// TempFolder: a private folder for a command's scratch files (a launcher's error files, a
// tune's candidate plans), made under $TMPDIR (else /tmp) and removed with what is in it.
//
//   const TempFolder scratch("saturate-tune", "tune");
//   write_json_file(scratch.file("plan.json"), plan_json);

#include <string>

namespace saturate {

/// Makes folder `dir` and any missing folders above it (mkdir -p); an existing folder is fine.
/// Throws saturate::Error "WHAT: cannot create 'DIR': 'FOLDER': reason" naming the folder above
/// it that failed (just 'DIR' when DIR itself failed).
void make_folders(const std::string& dir, const std::string& what);

/// make_folders() for the folder a file `path` goes into (nothing for a bare file name).
void make_parent_folders(const std::string& path, const std::string& what);

/// Removes `path` and everything in it, subfolders included, without following links (best
/// effort; at most 16 levels deep).
void remove_tree(const std::string& path);

class TempFolder {
 public:
  /// Makes TMPDIR/PREFIX-XXXXXX; throws saturate::Error starting with `component` when it
  /// cannot.
  TempFolder(const std::string& prefix, const char* component);
  /// Removes the folder and everything in it, subfolders included (best effort).
  ~TempFolder();
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;

  const std::string& path() const { return path_; }
  /// path()/name
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace saturate
