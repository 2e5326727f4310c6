// Fuzzes model_from_text: our model JSON and Hugging Face config.json import.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/spec/model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto model = foresight::model_from_text(text, "fuzz.json");
  if (model) (void)model->total_params();
  return 0;
}
