# tandem_module(NAME SOURCES ... DEPS ...): one static library per module, named tandem_NAME.
# Headers are included as "tandem/<module>/<file>.h" from src/.
function(tandem_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  add_library(tandem_${name} STATIC ${M_SOURCES})
  target_include_directories(tandem_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(tandem_${name} PUBLIC ${M_DEPS})
endfunction()
