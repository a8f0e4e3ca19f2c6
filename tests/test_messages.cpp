// printable() and bad_argument(): user text in one-line messages, and the names a spec may hold.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <layerinit/core/errors.hpp>
#include <layerinit/core/text.hpp>

#include <layerinit/dtypes/dtype.hpp>
#include <layerinit/init/presets.hpp>
#include <layerinit/init/recipes.hpp>
#include <layerinit/init/spec.hpp>
#include <layerinit/init/spec_json.hpp>

using namespace layerinit;

TEST(Listed, TheFirstItemsThenHowManyMore) {
  const std::vector<std::string> names{"a", "b", "c", "d", "e", "f", "g"};
  EXPECT_EQ(listed(names), "a, b, c, d, e and 2 more");
  EXPECT_EQ(listed(names, 8), "a, b, c, d, e, f, g");
  EXPECT_EQ(listed({"x"}), "x");
  EXPECT_EQ(listed({}), "");
}

TEST(Printable, EscapesControlsAndWhatIsNotUtf8) {
  using namespace std::string_literals;
  EXPECT_EQ(printable("model.layers.0.q_proj.weight"), "model.layers.0.q_proj.weight");
  EXPECT_EQ(printable("a\nb\r\t\x1b[31m\x7f"), "a\\x0ab\\x0d\\x09\\x1b[31m\\x7f");
  EXPECT_EQ(printable("nul\0x"s), "nul\\x00x");
  // UTF-8 passes: é (2 bytes), € (3), 𝔸 (4).
  EXPECT_EQ(printable("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x94\xb8"), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x94\xb8");
  // C1 controls: U+0085 (NEL) and U+009B (CSI) encoded, and raw bytes; U+00A0 is not a control.
  EXPECT_EQ(printable("\xc2\x85\xc2\x9b" "1m\xc2\xa0"), "\\xc2\\x85\\xc2\\x9b1m\xc2\xa0");
  EXPECT_EQ(printable("\x9b" "31m"), "\\x9b31m");
  // Not UTF-8: a lone continuation byte, a cut sequence, an overlong '/', a surrogate, past U+10FFFF.
  EXPECT_EQ(printable("\x80"), "\\x80");
  EXPECT_EQ(printable("\xe2\x82"), "\\xe2\\x82");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");
  EXPECT_EQ(printable("\xff\xfe"), "\\xff\\xfe");
  // Escaping twice changes nothing (messages pass through the library and the CLI).
  const std::string once = printable("x\n\xc2\x9b\xff\\y");
  EXPECT_EQ(once, "x\\x0a\\xc2\\x9b\\xff\\y");
  EXPECT_EQ(printable(once), once);
  // Cut after max bytes.
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("ab\n", 3), "ab\\x0a");
}

TEST(Printable, LibraryMessagesEscapeTheNameTheyEcho) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message([] { make_preset("x\n\x1b[2J"); }).rfind("preset 'x\\x0a\\x1b[2J' is unknown (valid: ", 0), 0u);
  EXPECT_EQ(message([] { make_recipe("\xc2\x9bx"); }).rfind("recipe '\\xc2\\x9bx' is unknown (valid: ", 0), 0u);
  // The Python package passes the message on as it is (one ValueError line): no CLI escapes it there.
  EXPECT_EQ(message([] { parse_dtype("bf\n16"); }), "dtype 'bf\\x0a16' is unknown (valid: fp32, fp16, bf16)");
}

// bad_argument: std::invalid_argument("<argument> <value> <problem>"), a text value quoted and escaped
// (a newline, a control byte or a quote inside cannot break the line or end the value early), a number
// as it is; the overloads pick text for const char*, std::string and std::string_view, a number for
// every integer type and double.
TEST(BadArgument, OneLineWithTheValueEscapedOrThePlainNumber) {
  auto message = [](auto f) {
    try {
      f();
    } catch (const layerinit::logic_error& e) {
      return std::string("logic_error: ") + e.what();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  using namespace std::string_literals;
  EXPECT_EQ(message([] { bad_argument("preset", "llama\n\x1b[2J", "is unknown (valid: gpt2)"); }),
            "preset 'llama\\x0a\\x1b[2J' is unknown (valid: gpt2)");
  EXPECT_EQ(message([] { bad_argument("recipe", "it's"s, "is unknown"); }), "recipe 'it\\x27s' is unknown");
  EXPECT_EQ(message([] { bad_argument("dtype", std::string_view("nul\0x", 5), "is unknown"); }), "dtype 'nul\\x00x' is unknown");
  EXPECT_EQ(message([] { bad_argument("layout", "", "is unknown"); }), "layout '' is unknown");
  EXPECT_EQ(message([] { bad_argument("tp", 0, "must be at least 1"); }), "tp 0 must be at least 1");
  EXPECT_EQ(message([] { bad_argument("thread count", -3, "must be >= 0"); }), "thread count -3 must be >= 0");
  EXPECT_EQ(message([] { bad_argument("rows", std::numeric_limits<std::uint64_t>::max(), "overflow"); }),
            "rows 18446744073709551615 overflow");
  EXPECT_EQ(message([] { bad_argument("bytes", std::size_t{4096}, "is too small"); }), "bytes 4096 is too small");
  EXPECT_EQ(message([] { bad_argument("ep", std::int64_t{-1}, "is negative"); }), "ep -1 is negative");
  EXPECT_EQ(message([] { bad_argument("std", 0.02, "is too wide"); }), "std 0.02 is too wide");
  EXPECT_EQ(message([] { bad_argument("std", 1e300, "overflows float"); }), "std 1e+300 overflows float");
  EXPECT_EQ(message([] { bad_argument("scale", -0.5f, "must be positive"); }), "scale -0.5 must be positive");
  // Without a value; a problem starting with ':' says what is wrong inside the value.
  EXPECT_EQ(message([] { bad_argument("layer_order", "must be ascending"); }), "layer_order must be ascending");
  EXPECT_EQ(message([] { bad_argument("tensor", "a\tb", ": fill 'x' is unknown"); }), "tensor 'a\\x09b': fill 'x' is unknown");
  // quote() for a second value inside the problem, cut like printable().
  EXPECT_EQ(quote("x\ny"), "'x\\x0ay'");
  EXPECT_EQ(quote("abcdef", 3), "'abc...'");
  // Bad input is std::invalid_argument, not the misuse type.
  EXPECT_THROW(bad_argument("tp", 0, "must be at least 1"), std::invalid_argument);
  EXPECT_EQ(message([] { bad_argument("x", "y", "z"); }).rfind("logic_error", 0), std::string::npos);
}

// The one type of bad input carries what the line says apart: the argument, the value as the line
// shows it (quoted text or a number; empty when none) and the problem without the ": " that joins it.
TEST(BadInput, CarriesTheArgumentTheValueAndTheProblemApart) {
  auto caught = [](auto f) -> bad_input {
    try {
      f();
    } catch (const bad_input& e) {
      return e;
    }
    return bad_input("none", "", "thrown");
  };
  const bad_input a = caught([] { bad_argument("preset", "llama\n", "is unknown (valid: gpt2)"); });
  EXPECT_EQ(a.argument(), "preset");
  EXPECT_EQ(a.value(), "'llama\\x0a'");
  EXPECT_EQ(a.problem(), "is unknown (valid: gpt2)");
  const bad_input n = caught([] { bad_argument("tp", 0, "must be at least 1"); });
  EXPECT_EQ(n.argument(), "tp");
  EXPECT_EQ(n.value(), "0");
  EXPECT_EQ(n.problem(), "must be at least 1");
  const bad_input inner = caught([] { bad_argument("tensor", "w", ": fill 'x' is unknown"); });
  EXPECT_EQ(std::string(inner.what()), "tensor 'w': fill 'x' is unknown");
  EXPECT_EQ(inner.value(), "'w'");
  EXPECT_EQ(inner.problem(), "fill 'x' is unknown");
  const bad_input none = caught([] { bad_argument("layer_order", "must be ascending"); });
  EXPECT_EQ(none.value(), "");
  EXPECT_EQ(none.problem(), "must be ascending");
  // A line of its own words (the CLI's) keeps the three as given.
  const bad_input own("--tp", "'0'", "must be a positive integer", "--tp must be a positive integer, got '0'");
  EXPECT_EQ(std::string(own.what()), "--tp must be a positive integer, got '0'");
  EXPECT_EQ(own.argument(), "--tp");
  EXPECT_EQ(own.value(), "'0'");
  // A spec's error is one too: its source the argument, its reason the problem.
  try {
    (void)spec_from_json("{");
    ADD_FAILURE() << "accepted";
  } catch (const bad_input& e) {
    const auto* spec = dynamic_cast<const spec_error*>(&e);
    ASSERT_NE(spec, nullptr);
    EXPECT_EQ(e.argument(), "spec");
    EXPECT_EQ(spec->reason(), e.problem());
    EXPECT_EQ(std::string(e.what()), "spec: " + e.problem());
  }
}

// A name with a C1 control or bytes that are not UTF-8 would reach tables, JSON and file headers as
// it is: refused like C0 controls were.
TEST(Printable, SpecNamesMustBePrintableUtf8) {
  auto message = [](const std::string& name) {
    ModelSpec m = make_preset("llama-tiny");
    m.pre[0].name = name;
    try {
      m.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(message("embed\xc2\x9b"), "model 'llama-tiny': pre tensor 0 'embed\\xc2\\x9b': name contains control characters");
  EXPECT_EQ(message("embed\xff"), "model 'llama-tiny': pre tensor 0 'embed\\xff': name is not valid UTF-8");
  EXPECT_EQ(message("embed\n"), "model 'llama-tiny': pre tensor 0 'embed\\x0a': name contains control characters");
  EXPECT_EQ(message("embed\xc3\xa9"), "accepted");
}
