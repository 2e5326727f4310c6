// Export formats.
#include "gui/models/export_format.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "foresight/gui_config.h"

namespace foresight::gui {

bool svg_export_available() { return FORESIGHT_GUI_HAVE_SVG != 0; }

Result<ExportFormat> export_format(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (ext == ".png") return ExportFormat::kPng;
  if (ext == ".svg") {
    if (!svg_export_available())
      return Error(path +
                   ": SVG export is not in this build (Qt SVG was not found at configure time; "
                   "install qt6-svg-dev and reconfigure); use .png");
    return ExportFormat::kSvg;
  }
  return Error(path + ": cannot tell the format from \"" + ext + "\"; use .png or .svg");
}

}  // namespace foresight::gui
