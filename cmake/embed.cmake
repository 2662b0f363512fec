# outboxd_embed(TARGET name NAMESPACE ns FUNCTION fn FILES ...): compiles the files into a static
# library exposing `std::vector<std::pair<std::string_view, std::string_view>> ns::fn()` (file name,
# contents), so the binary carries its migrations and default configuration wherever it runs.
set(_outboxd_embed_script "${CMAKE_CURRENT_LIST_DIR}/embed_generate.cmake")

function(outboxd_embed)
  cmake_parse_arguments(E "" "TARGET;NAMESPACE;FUNCTION" "FILES" ${ARGN})
  set(out "${CMAKE_CURRENT_BINARY_DIR}/${E_TARGET}.cpp")
  # A ';' would split the command line: pass the list with '|' between the files.
  string(REPLACE ";" "|" files_arg "${E_FILES}")
  add_custom_command(
    OUTPUT "${out}"
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DNAMESPACE=${E_NAMESPACE} -DFUNCTION=${E_FUNCTION}
            "-DFILES=${files_arg}" -P "${_outboxd_embed_script}"
    DEPENDS ${E_FILES} "${_outboxd_embed_script}"
    COMMENT "Embedding ${E_TARGET}"
    VERBATIM)
  add_library(${E_TARGET} STATIC "${out}")
  target_link_libraries(${E_TARGET} PRIVATE outboxd_flags)
endfunction()
