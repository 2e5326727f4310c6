// Plot export formats, chosen by the file's suffix.
//
//   auto f = export_format("step.svg");   // ExportFormat::kSvg, or an error naming the file
#pragma once

#include <string>

#include "sim/core/status.h"

namespace foresight::gui {

enum class ExportFormat { kPng, kSvg };

// ".png" or ".svg" (any case); SVG only when the build has Qt SVG (svg_export_available()).
Result<ExportFormat> export_format(const std::string& path);
bool svg_export_available();

}  // namespace foresight::gui
