#include "json_value.hpp"

#include <cstdint>
#include <string>
#include <utility>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

#include <layerinit/init/json_read.hpp>

namespace nb = nanobind;

namespace layerinit::python {
namespace {

using json = nlohmann::json;

std::string py_type_name(nb::handle v) { return nb::cast<std::string>(nb::str(v.type().attr("__name__"))); }

// repr(v), at most 60 characters as the package shows a value, in one printable line.
std::string shown(nb::handle v) {
  std::string text;
  try {
    text = nb::cast<std::string>(nb::repr(v));
  } catch (const nb::python_error&) {
    text = "<" + py_type_name(v) + ">";
  }
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return printable(text);
}

// `argument` and the path in it, its last 57 characters where longer than 60, as the package names a place.
std::string where(const std::string& argument, const std::string& path) {
  return argument + (path.size() <= 60 ? path : "..." + path.substr(path.size() - 57));
}

[[noreturn]] void refuse(const std::string& at, const std::string& problem) {
  throw bad_input(at, "", problem, at + ": " + problem);
}

std::string utf8(nb::handle s, const std::string& at) {
  std::optional<std::string> text = utf8_of(s);
  if (!text) refuse(at, "a str that is not valid text (a lone surrogate)");
  return *std::move(text);
}

json integer(nb::handle v, const std::string& at) {
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow == 0 && !(n == -1 && PyErr_Occurred())) return n >= 0 ? json(static_cast<std::uint64_t>(n)) : json(n);
  PyErr_Clear();
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (!(u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) return json(static_cast<std::uint64_t>(u));
    PyErr_Clear();
  }
  // As JSON text reads it: an integer beyond 64 bits is a number with a fraction's precision.
  const double d = PyLong_AsDouble(v.ptr());
  if (d == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    refuse(at, "the integer " + shown(v) + " is too large for a JSON number");
  }
  return json(d);
}

json convert(nb::handle v, const std::string& argument, const std::string& path, std::size_t depth) {
  const std::string at = where(argument, path);
  if (v.is_none()) return nullptr;
  if (PyBool_Check(v.ptr())) return v.ptr() == Py_True;
  if (PyLong_Check(v.ptr())) return integer(v, at);
  if (PyFloat_Check(v.ptr())) return PyFloat_AsDouble(v.ptr());
  if (PyUnicode_Check(v.ptr())) return utf8(v, at);
  const bool list = PyList_Check(v.ptr()) || PyTuple_Check(v.ptr());
  const bool mapping = !list && (PyDict_CheckExact(v.ptr()) ||
                                 nb::isinstance(v, nb::module_::import_("collections.abc").attr("Mapping")));
  if (!list && !mapping)
    refuse(at, shown(v) + " (" + py_type_name(v) + ") is not a JSON value (a mapping with str keys, a list, a str, an "
                                                   "int, a float, a bool or None)");
  if (depth > JsonReader::kDefaultMaxDepth)
    refuse(argument, "nested deeper than " + std::to_string(JsonReader::kDefaultMaxDepth) + " levels (objects and arrays)");
  if (list) {
    json out = json::array();
    const nb::sequence items = nb::borrow<nb::sequence>(v);
    const std::size_t n = nb::len(items);
    for (std::size_t i = 0; i < n; ++i)
      out.push_back(convert(items[i], argument, path + "[" + std::to_string(i) + "]", depth + 1));
    return out;
  }
  json out = json::object();
  try {
    // A dict's own items; a subclass's or another Mapping's, as it defines them.
    const nb::object items = PyDict_CheckExact(v.ptr()) ? nb::object(nb::borrow<nb::dict>(v).items()) : v.attr("items")();
    for (nb::handle item : items) {
      const nb::object key = item[0], value = item[1];
      if (!PyUnicode_Check(key.ptr())) refuse(at, "key " + shown(key) + " (" + py_type_name(key) + ") is not a str");
      out[utf8(key, at)] = convert(value, argument, path + "[" + shown(key) + "]", depth + 1);
    }
  } catch (const nb::python_error& e) {  // its type and text, as Python shows an exception, without the traceback
    const std::string why = py_type_name(e.value()) + ": " + nb::cast<std::string>(nb::str(e.value()));
    refuse(at, "reading the " + py_type_name(v) + " raised " + printable(why, 200));
  }
  return out;
}

}  // namespace

std::optional<std::string> utf8_of(nb::handle str) {
  Py_ssize_t size = 0;
  const char* text = PyUnicode_AsUTF8AndSize(str.ptr(), &size);
  if (text == nullptr) {
    PyErr_Clear();
    return std::nullopt;
  }
  return std::string(text, static_cast<std::size_t>(size));
}

json json_of(nb::handle v, const std::string& argument) { return convert(v, argument, "", 1); }

namespace {

// Bytes that are not UTF-8 (a stored tensor's name in a file) as U+FFFD, as the JSON text shows them
// (nlohmann's error_handler_t::replace).
nb::str str_of(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (o == nullptr) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

}  // namespace

nb::object python_of(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::object: {
      nb::dict d;
      for (const auto& [k, v] : j.items()) d[str_of(k)] = python_of(v);
      return d;  // moved (C++20 implicit move into nb::object)
    }
    case nlohmann::ordered_json::value_t::array: {
      nb::list l;
      for (const auto& v : j) l.append(python_of(v));
      return l;
    }
    case nlohmann::ordered_json::value_t::string: return str_of(j.get_ref<const std::string&>());
    case nlohmann::ordered_json::value_t::boolean: return nb::bool_(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return nb::int_(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return nb::int_(j.get<std::uint64_t>());
    case nlohmann::ordered_json::value_t::number_float: return nb::float_(j.get<double>());
    default: return nb::none();
  }
}

}  // namespace layerinit::python
