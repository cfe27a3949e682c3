/* Whether an AMDGPU code object (an ELF in memory) defines a function
 * symbol: what hipModuleGetFunction looks up. Shared by the fake runtime and
 * the host test. */
#ifndef TF_TEST_ELF_SYMBOLS_H
#define TF_TEST_ELF_SYMBOLS_H

#include <elf.h>
#include <stdbool.h>
#include <string.h>

static inline const Elf64_Shdr *elf_section(const unsigned char *img, int i) {
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)img;
    return (const Elf64_Shdr *)(img + h->e_shoff + (size_t)i * h->e_shentsize);
}

static inline bool elf_has_function(const unsigned char *img, const char *name) {
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)img;
    for (int i = 0; i < h->e_shnum; i++) {
        const Elf64_Shdr *sh = elf_section(img, i);
        if (sh->sh_type != SHT_SYMTAB && sh->sh_type != SHT_DYNSYM) continue;
        const char *names = (const char *)img + elf_section(img, (int)sh->sh_link)->sh_offset;
        const Elf64_Sym *sym = (const Elf64_Sym *)(img + sh->sh_offset);
        for (size_t k = 0; k < sh->sh_size / sizeof *sym; k++)
            if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && !strcmp(names + sym[k].st_name, name)) return true;
    }
    return false;
}

#endif
