// Reads HDF5 checkpoints back through the C API, independently of the writer: every dataset as raw
// bytes in its own file type (nothing converts; a virtual dataset reads through its sources), and
// the root's string attributes.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace layerinit::testing {

struct Hdf5Dataset {
  std::vector<std::uint64_t> shape;
  std::string dtype;  // the "dtype" attribute
  std::string bytes;
  bool is_virtual = false;
};

inline std::string hdf5_string_attr(hid_t obj, const char* name) {
  std::string out;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return out;
  hid_t at = H5Aget_type(a);
  char* p = nullptr;
  if (H5Aread(a, at, &p) >= 0 && p) out = p;
  H5free_memory(p);
  H5Tclose(at);
  H5Aclose(a);
  return out;
}

// Empty when the file does not open.
inline std::map<std::string, Hdf5Dataset> read_hdf5_datasets(const std::filesystem::path& file) {
  std::map<std::string, Hdf5Dataset> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  H5G_info_t info;
  H5Gget_info(f, &info);
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[512];
    H5Lget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t type = H5Dget_type(d), space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    Hdf5Dataset t;
    t.shape.assign(dims.begin(), dims.end());
    t.is_virtual = H5Pget_layout(dcpl) == H5D_VIRTUAL;
    t.bytes.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)) * H5Tget_size(type));
    if (H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.bytes.data()) < 0) t.bytes = "<read failed>";
    t.dtype = hdf5_string_attr(d, "dtype");
    out[name] = std::move(t);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(d);
  }
  H5Fclose(f);
  return out;
}

inline std::map<std::string, std::string> read_hdf5_root_attributes(const std::filesystem::path& file) {
  std::map<std::string, std::string> out;
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return out;
  H5O_info_t oi;
#if H5_VERSION_GE(1, 12, 0)
  H5Oget_info3(f, &oi, H5O_INFO_NUM_ATTRS);
#else
  H5Oget_info2(f, &oi, H5O_INFO_NUM_ATTRS);
#endif
  for (hsize_t i = 0; i < oi.num_attrs; ++i) {
    char name[256];
    H5Aget_name_by_idx(f, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    out[name] = hdf5_string_attr(f, name);
  }
  H5Fclose(f);
  return out;
}

}  // namespace layerinit::testing
