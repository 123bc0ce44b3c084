module flashattn

go 1.19
