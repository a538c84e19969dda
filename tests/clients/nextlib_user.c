#include <stdio.h>
#include <time.h>

int main(void)
{
    printf("nextlib: %s\n", time(NULL) > 0 ? "ok" : "bad");
    return 0;
}
